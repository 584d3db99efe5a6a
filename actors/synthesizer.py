"""The synthesizer (the joiner): finish with the answer, or ask for another plan round."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import ClassVar

import msgspec

from protocols import Message, Stream, SynthesisDecision, SynthesisTask, Verb
from runtime import telemetry
from runtime.actor import RoleActor, Source, WorkQueue, on
from runtime.bus import Delivery
from runtime.config import RoleOption
from runtime.models import ChatMessage, answer_constraint

from . import prompts
from .answers import DecisionAnswer, find_json_object


class Synthesizer(RoleActor):
    """Pulls ``<prefix>.synthesis`` and ``<prefix>.synthesis-for.<role>`` (runs that name it,
    a sub-team's; a team's own synthesizer pulls only those); answers with a decision on
    ``<prefix>.result.<run_id>.<role>``."""

    role = "synthesizer"
    role_options: ClassVar[Mapping[str, RoleOption]] = MappingProxyType({})

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
        messages: list[ChatMessage] = [
            {"role": "system", "content": self.config.system_prompt or prompts.SYNTHESIZER},
            {"role": "user", "content": prompts.synthesis_request(
                task.goal, task.plan, task.results, task.failures, task.replans_left)}]
        with telemetry.synthesis_span(delivery, task, role=self.name) as span:
            completion = await self.model.complete(messages, constraint=answer_constraint(
                self.model.settings.structured, DecisionAnswer))
            span.model(self.model.settings.model, completion.model, completion.usage,
                       [completion.finish_reason])
            if span.capture:
                span.content("gen_ai.input.messages", msgspec.json.encode(messages).decode())
                span.content("gen_ai.output.messages", completion.text)
        answer = find_json_object(completion.text)
        if answer is None:  # plain prose is taken as the answer itself
            answer = {"action": "finish", "answer": completion.text.strip()}
        wants_replan = answer.get("action") == "replan" and task.replans_left > 0
        decision = SynthesisDecision(
            run_id=task.run_id, round=task.plan.round,
            action="replan" if wants_replan else "finish",
            answer="" if wants_replan else str(answer.get("answer") or answer.get("reason") or ""),
            reason=str(answer.get("reason") or ""), usage=completion.usage, nonce=task.nonce,
        )
        await self.bus.publish_durable(
            self.bus.subject(Verb.RESULT, task.run_id, self.name), decision,
            msg_id=f"{task.run_id}/synthesis/{task.plan.round}/{delivery.stream_seq}"
                   f"/{task.nonce}",
        )
