"""The synthesizer (the joiner): finish with the answer, or ask for another plan round."""

from __future__ import annotations

from collections.abc import Sequence

from protocols import Message, Stream, SynthesisDecision, SynthesisTask, Verb
from runtime.actor import Source, WorkQueue, on
from runtime.delivery import Delivery
from runtime.role import RoleActor

from . import prompts
from ._json import DecisionAnswer, find_json_object, response_format


class Synthesizer(RoleActor):
    """Pulls ``<prefix>.synthesis`` and ``<prefix>.synthesis-for.<role>`` (runs that name it,
    a sub-team's; a team's own synthesizer pulls only those); answers with a decision on
    ``<prefix>.result.<run_id>.<role>``."""

    role = "synthesizer"

    def sources(self) -> Sequence[Source]:
        own = WorkQueue(Stream.WORK, self.bus.subject(Verb.SYNTHESIS_FOR, self.name),
                        f"synthesis-{self.name}")
        if self.name in self.ctx.team.dedicated_synthesizers():  # a sub-team's own
            return [own]
        return [WorkQueue(Stream.WORK, self.bus.subject(Verb.SYNTHESIS), "synthesis"), own]

    def describe(self, message: Message) -> str:
        assert isinstance(message, SynthesisTask)
        return f"{message.run_id}/synthesis"

    @on(SynthesisTask)
    async def synthesize(self, task: SynthesisTask, delivery: Delivery) -> None:
        completion = await self.model.complete([
            {"role": "system", "content": self.config.system_prompt or prompts.SYNTHESIZER},
            {"role": "user", "content": prompts.synthesis_request(
                task.goal, task.plan, task.results, task.failures, task.replans_left)},
        ], response_format=response_format(
            DecisionAnswer, bool(self.config.options.get("structured_output"))))
        answer = find_json_object(completion.text)
        if answer is None:  # plain prose is taken as the answer itself
            answer = {"action": "finish", "answer": completion.text.strip()}
        wants_replan = answer.get("action") == "replan" and task.replans_left > 0
        decision = SynthesisDecision(
            run_id=task.run_id, round=task.plan.round,
            action="replan" if wants_replan else "finish",
            answer="" if wants_replan else str(answer.get("answer") or answer.get("reason", "")),
            reason=str(answer.get("reason", "")), usage=completion.usage,
        )
        await self.bus.publish_durable(
            self.bus.subject(Verb.RESULT, task.run_id, self.name), decision,
            msg_id=f"{task.run_id}/synthesis/{task.plan.round}/{task.nonce}",
        )
