"""The critic: adversarial by prompt, and an approval of code must survive running it.

The model reviews with the Python runner at hand; then, whatever it said, code in an
approved output is run once more here, so an agreeable critic cannot pass code that
does not run.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import ClassVar

from protocols import (
    Message,
    PlanDecision,
    PlanReviewTask,
    ReviewTask,
    Stream,
    Usage,
    Verb,
    Verdict,
)
from runtime import telemetry
from runtime.actor import RoleActor, RoleContext, Source, WorkQueue, on
from runtime.agent import run_agent
from runtime.bus import Delivery
from runtime.config import RoleOption
from runtime.errors import PlancastError
from runtime.models import answer_constraint

from . import prompts
from .answers import VerdictAnswer, find_json_object

_CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)
_CODE_HINTS = ("def ", "import ", "print(", "class ", "assert ", "return ")


def code_in(output: str) -> list[str]:
    """Python code in an output: fenced blocks, or the whole output if it is a program."""
    blocks = [b for b in _CODE_BLOCK.findall(output) if b.strip()]
    if blocks:
        return blocks
    if any(hint in output for hint in _CODE_HINTS):
        try:
            ast.parse(output)
        except SyntaxError:
            return []
        return [output]
    return []


def verdict_of(text: str) -> tuple[bool, str]:
    """The critic model's answer as (approved, critique); prose is a rejection that says so."""
    answer = find_json_object(text)
    if not answer:
        return False, f"the critic's answer was not a JSON verdict: {text[:500]}"
    return answer.get("approved") is True, str(answer.get("critique") or text)


class Critic(RoleActor):
    """Pulls ``<prefix>.review``; answers with a Verdict on ``<prefix>.result.<run_id>.<role>``."""

    role = "critic"
    role_options: ClassVar[Mapping[str, RoleOption]] = MappingProxyType({})

    def __init__(self, ctx: RoleContext, *, instance: str | None = None) -> None:
        super().__init__(ctx, instance=instance)
        if "python" in ctx.tools:  # the critic always has an interpreter at hand
            self.tools = ctx.tools.subset({*ctx.role.tools, "python"} & set(ctx.tools.names()))

    def sources(self) -> Sequence[Source]:
        return [WorkQueue(Stream.WORK, self.bus.subject(Verb.REVIEW), "review")]

    def describe(self, message: Message) -> str:
        if isinstance(message, PlanReviewTask):
            return f"{message.run_id}/plan-{message.round}"
        assert isinstance(message, ReviewTask)
        return f"{message.run_id}/{message.step.id}"

    @on(PlanReviewTask)
    async def review_plan(self, task: PlanReviewTask, delivery: Delivery) -> None:
        """A plan held for approval (``review_plan = "auto"``): approve or reject it."""
        outcome = await run_agent(
            self.model,
            [{"role": "system", "content": self.config.system_prompt or prompts.CRITIC},
             {"role": "user", "content": prompts.plan_review_request(
                 task.goal, task.steps, task.done, task.policy)}],
            self.tools, max_rounds=self.config.max_tool_rounds,
            constraint=answer_constraint(self.model.settings.structured, VerdictAnswer),
        )
        approved, reason = verdict_of(outcome.text)
        await self.bus.publish_durable(
            self.bus.subject(Verb.RESULT, task.run_id, self.name),
            PlanDecision(run_id=task.run_id, round=task.round, digest=task.digest,
                         approved=approved, reason=reason, by=f"{self.name}/{self.instance}",
                         usage=outcome.usage, nonce=task.nonce),
            msg_id=f"{task.run_id}/plan/{task.round}/{task.digest}/{delivery.stream_seq}"
                   f"/{task.nonce}",
        )

    @on(ReviewTask)
    async def review(self, task: ReviewTask, delivery: Delivery) -> None:
        with telemetry.review_span(delivery, task, role=self.name) as span:
            approved, critique, usage = await self._judge(task, span)
            span.set("plancast.approved", approved)
            span.content("gen_ai.output.messages", critique)
        await self.bus.publish_durable(
            self.bus.subject(Verb.RESULT, task.run_id, self.name),
            Verdict(run_id=task.run_id, step_id=task.step.id, attempt=task.attempt,
                    approved=approved, critique=critique, usage=usage, nonce=task.nonce),
            msg_id=f"{task.run_id}/{task.step.id}/{task.attempt}/{delivery.stream_seq}"
                   f"/{task.nonce}/verdict",
        )

    async def _judge(self, task: ReviewTask, span: telemetry.SpanLike) -> tuple[bool, str, Usage]:
        """The verdict on the output: approved, the critique, and the model's usage."""
        outcome = await run_agent(
            self.model,
            [{"role": "system", "content": self.config.system_prompt or prompts.CRITIC},
             {"role": "user", "content": prompts.review_request(
                 task.goal, task.step, task.output, task.inputs)}],
            self.tools, max_rounds=self.config.max_tool_rounds,
            constraint=answer_constraint(self.model.settings.structured, VerdictAnswer),
            span=span,
        )
        approved, critique = verdict_of(outcome.text)
        if approved:
            failure = await self._run_code(task.output)
            if failure:
                approved, critique = False, f"the code does not run: {failure}"
        return approved, critique, outcome.usage

    async def _run_code(self, output: str) -> str:
        """The first failure of the output's code, or "" if it all runs (or there is none)."""
        if "python" not in self.tools:
            return ""
        for block in code_in(output):
            try:
                await self.tools.run("python", {"code": block})
            except PlancastError as exc:
                return str(exc)
        return ""
