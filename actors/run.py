"""The life of one run, owned by a planner: plan (streamed), dispatch, review, join, replan.

Every state change goes through ``_lock`` so results arriving while the plan is still
streaming see a consistent DAG, and every change is an event, in order.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Literal

import anyio
import msgspec

from protocols import (
    CriticVerdict,
    Message,
    Plan,
    PlanFinished,
    PlanRejected,
    PlanStarted,
    ReplanRequest,
    ReplanStarted,
    ReviewTask,
    RunFailed,
    RunFinished,
    RunRequest,
    RunStarted,
    Step,
    StepClaimed,
    StepDispatched,
    StepFailed,
    StepFinished,
    StepPlanned,
    StepResult,
    StepStarted,
    StepTask,
    SynthesisDecision,
    SynthesisTask,
    Usage,
    UsageRecorded,
    Verb,
    Verdict,
)
from runtime.errors import ModelError, PlanValidationError
from runtime.events import EventLog
from runtime.scheduler import Scheduler, StepState

from . import prompts

if TYPE_CHECKING:
    from .planner import Planner

log = logging.getLogger(__name__)

PREVIEW = 4000
"""Characters of a step's output carried in its ``step.finished`` event."""


Stage = Literal["plan", "execute", "synthesize", "runtime"]


class RunFailure(Exception):
    """The run cannot finish; carries the stage and a reason for the ``run.failed`` event."""

    def __init__(self, stage: Stage, reason: str) -> None:
        super().__init__(reason)
        self.stage = stage


class Run:
    def __init__(self, planner: Planner, run_id: str, request: RunRequest) -> None:
        self.planner = planner
        self.bus = planner.bus
        self.team = planner.ctx.team
        self.run_id = run_id
        self.request = request
        self.events = EventLog(self.bus, run_id)
        self.scheduler = Scheduler(
            known_roles=[r.name for r in self.team.executors()],
            known_tools=planner.ctx.tools.names(), max_steps=request.max_steps,
        )
        self.stream_plan = bool(planner.config.options.get("stream_plan", True))
        """Dispatch steps while the plan streams (LLMCompiler); off waits for the whole plan."""
        self.usage = Usage()
        self._lock = anyio.Lock()
        self._round_over = anyio.Event()
        self._replan: ReplanRequest | None = None
        self._review_output: dict[int, str] = {}
        self._feedback: dict[int, str] = {}
        self._decision: SynthesisDecision | None = None
        self._decided = anyio.Event()

    # -- the run, top to bottom ----------------------------------------------------------

    async def drive(self) -> None:
        req = self.request
        await self.events.emit(RunStarted(run_id=self.run_id, goal=req.goal,
                                          planner=f"{self.planner.name}/{self.planner.instance}"))
        reason, source = "", ""
        try:
            for round_ in range(req.max_replans + 1):
                if round_:
                    self.scheduler.new_round()
                    await self.events.emit(ReplanStarted(run_id=self.run_id, round=round_,
                                                         reason=reason, source=source))
                await self._plan(round_, reason)
                await self._round_over.wait()
                reason, source = self._why_replan()
                if not reason:
                    decision = await self._synthesize(req.max_replans - round_)
                    if decision.action == "finish":
                        await self.events.emit(RunFinished(run_id=self.run_id,
                                                           answer=decision.answer,
                                                           usage=self.usage))
                        return
                    reason, source = decision.reason or "the synthesizer asked", "synthesizer"
            raise RunFailure("execute", f"no replans left; last reason: {reason}")
        except RunFailure as failure:
            await self._fail(failure.stage, str(failure))
        except ModelError as exc:
            await self._fail("plan", f"the planner's model failed: {exc}")
        except Exception as exc:
            log.exception("run %s crashed", self.run_id)
            await self._fail("runtime", f"{type(exc).__name__}: {exc}")

    async def _plan(self, round_: int, reason: str) -> None:
        """Stream the plan into the scheduler; each step is dispatched as soon as it is ready."""
        self._round_over = anyio.Event()
        self._replan = None
        accepted: list[Step] = []
        error = ""
        model = self.planner.model
        for attempt in range(1, self.team.plan_attempts + 1):
            await self.events.emit(PlanStarted(run_id=self.run_id, round=round_,
                                               model=model.settings.model))
            content = prompts.planner_request(
                self.request.goal, self.team.executors(), self.planner.ctx.tools,
                first_id=self._next_id(), done=self.scheduler.results,
                done_steps={s.id: s for s in self.scheduler.steps}, reason=reason,
                accepted=accepted, error=error,
            )
            messages = [{"role": "system",
                         "content": self.planner.config.system_prompt or prompts.PLANNER},
                        {"role": "user", "content": content}]
            try:
                held: list[Step] = []  # with streaming off, steps wait for the whole plan
                async with model.stream_lines(messages) as lines:
                    try:
                        async for number, line in _numbered(lines):
                            step = _parse_step(number, line)
                            if step is None or step in accepted or step in held:
                                continue
                            if not self.stream_plan:
                                held.append(step)
                                continue
                            await self._accept(round_, step)
                            accepted.append(step)
                    finally:
                        await self._spent("planner", lines.usage or Usage())
                for step in held:
                    await self._accept(round_, step)
                    accepted.append(step)
                async with self._lock:
                    self.scheduler.close_plan()
                    await self.events.emit(PlanFinished(run_id=self.run_id, round=round_,
                                                        steps=len(accepted)))
                    self._check_round_over()
                return
            except PlanValidationError as exc:
                error = str(exc)
                await self.events.emit(PlanRejected(
                    run_id=self.run_id, round=round_, error=error,
                    retrying=attempt < self.team.plan_attempts))
        raise RunFailure("plan", f"the plan was invalid {self.team.plan_attempts} time(s); "
                                 f"last error: {error}")

    async def _accept(self, round_: int, step: Step) -> None:
        async with self._lock:
            self._check_tool_allowed(step)
            ready = self.scheduler.add(step)
            # Subscribers see the real DAG: $N references count as dependencies.
            shown = msgspec.structs.replace(
                step, depends_on=sorted(self.scheduler.dependencies(step.id)))
            await self.events.emit(StepPlanned(run_id=self.run_id, round=round_, step=shown))
            await self._dispatch(ready)

    async def _dispatch(self, steps: list[Step]) -> None:
        for step in steps:
            self.scheduler.start(step.id)
            attempt = self.scheduler.attempt(step.id)
            if step.tool is not None:
                sent = msgspec.structs.replace(step, args=self.scheduler.resolve_args(step))
                inputs: dict[int, str] = {}
            else:
                sent, inputs = step, self.scheduler.inputs_for(step)
            task = StepTask(run_id=self.run_id, goal=self.request.goal, step=sent,
                            attempt=attempt, inputs=inputs,
                            feedback=self._feedback.get(step.id, ""))
            await self.bus.publish_durable(
                self.bus.subject(Verb.STEP, step.role), task,
                msg_id=f"{self.run_id}/{step.id}/{attempt}",
            )
            await self.events.emit(StepDispatched(run_id=self.run_id, step_id=step.id,
                                                  role=step.role, attempt=attempt))

    async def _synthesize(self, replans_left: int) -> SynthesisDecision:
        self._decided = anyio.Event()
        plan = Plan(steps=self.scheduler.steps, round=self.scheduler.round)
        task = SynthesisTask(run_id=self.run_id, goal=self.request.goal, plan=plan,
                             results=self.scheduler.results, failures=self.scheduler.failures,
                             replans_left=replans_left)
        await self.bus.publish_durable(self.bus.subject(Verb.SYNTHESIS), task,
                                       msg_id=f"{self.run_id}/synthesis/{plan.round}")
        await self._decided.wait()
        assert self._decision is not None
        return self._decision

    # -- what comes back -----------------------------------------------------------------

    async def receive(self, message: Message) -> None:
        async with self._lock:
            match message:
                case StepClaimed():
                    if self._current(message.step_id, message.attempt):
                        await self.events.emit(StepStarted(
                            run_id=self.run_id, step_id=message.step_id,
                            attempt=message.attempt, executor=message.executor))
                case StepResult():
                    await self._on_result(message)
                case Verdict():
                    await self._on_verdict(message)
                case SynthesisDecision():
                    await self._spent("synthesizer", message.usage)
                    if message.round == self.scheduler.round and not self._decided.is_set():
                        self._decision = message
                        self._decided.set()
                case ReplanRequest():
                    self._replan = message
                    self._round_over.set()

    async def _on_result(self, result: StepResult) -> None:
        if not self._current(result.step_id, result.attempt):
            log.info("run %s: stale result for step %d attempt %d ignored",
                     self.run_id, result.step_id, result.attempt)
            return
        await self._spent(f"step:{result.step_id}", result.usage)
        step = self.scheduler.step(result.step_id)
        if not result.ok:
            retry = result.retryable and result.attempt < self.team.step_attempts
            await self._step_failed(step, result.attempt, result.error, retry)
            return
        output = result.output or ""
        if step.review and step.id not in self._review_output:
            self._review_output[step.id] = output
            review = ReviewTask(run_id=self.run_id, goal=self.request.goal, step=step,
                                attempt=result.attempt, output=output,
                                inputs=self.scheduler.inputs_for(step))
            await self.bus.publish_durable(
                self.bus.subject(Verb.REVIEW), review,
                msg_id=f"{self.run_id}/{step.id}/{result.attempt}/review")
            return
        await self._step_done(step, result.attempt, output, result.executor,
                              result.finished_at - result.started_at)

    async def _on_verdict(self, verdict: Verdict) -> None:
        if not self._current(verdict.step_id, verdict.attempt) or \
                verdict.step_id not in self._review_output:
            return
        await self._spent(f"critic:{verdict.step_id}", verdict.usage)
        await self.events.emit(CriticVerdict(
            run_id=self.run_id, step_id=verdict.step_id, attempt=verdict.attempt,
            approved=verdict.approved, critique=verdict.critique))
        step = self.scheduler.step(verdict.step_id)
        output = self._review_output.pop(step.id)
        if verdict.approved:
            await self._step_done(step, verdict.attempt, output, "", 0.0)
            return
        self._feedback[step.id] = verdict.critique
        retry = verdict.attempt < self.team.review_attempts
        await self._step_failed(step, verdict.attempt,
                                f"rejected by the critic: {verdict.critique}", retry)

    async def _step_done(self, step: Step, attempt: int, output: str, executor: str,
                         duration: float) -> None:
        ready = self.scheduler.complete(step.id, output)
        preview = output if len(output) <= PREVIEW else output[:PREVIEW] + "…"
        await self.events.emit(StepFinished(run_id=self.run_id, step_id=step.id,
                                            attempt=attempt, output=preview,
                                            executor=executor, duration=max(duration, 0.0)))
        await self._dispatch(ready)
        self._check_round_over()

    async def _step_failed(self, step: Step, attempt: int, error: str, retry: bool) -> None:
        await self.events.emit(StepFailed(run_id=self.run_id, step_id=step.id, attempt=attempt,
                                          error=error, will_retry=retry))
        if retry:
            self.scheduler.retry(step.id)
            await self._dispatch([step])
        else:
            self.scheduler.fail(step.id, error)
            self._check_round_over()

    # -- helpers -------------------------------------------------------------------------

    def _current(self, step_id: int, attempt: int) -> bool:
        """Is this the outcome we wait for? Stale attempts and dropped steps are not."""
        try:
            state = self.scheduler.state(step_id)
        except KeyError:
            return False
        return state is StepState.RUNNING and self.scheduler.attempt(step_id) == attempt

    def _check_round_over(self) -> None:
        if self.scheduler.closed and self.scheduler.is_done():
            self._round_over.set()

    def _why_replan(self) -> tuple[str, str]:
        if self._replan is not None:
            return self._replan.reason, self._replan.source
        failures = self.scheduler.failures
        if failures:
            return "; ".join(f"step {sid} failed: {err}" for sid, err in failures.items()), \
                "planner"
        return "", ""

    def _check_tool_allowed(self, step: Step) -> None:
        role = self.team.roles.get(step.role)
        if role is not None and step.tool is not None and step.tool not in role.tools:
            raise PlanValidationError(
                f"step {step.id}: role {step.role!r} may not use tool {step.tool!r}; "
                f"its tools are: {', '.join(role.tools) or 'none'}. Assign the step to a role "
                "that has the tool.", step_id=step.id)

    def _next_id(self) -> int:
        return max((s.id for s in self.scheduler.steps), default=0) + 1

    async def _spent(self, source: str, usage: Usage) -> None:
        if usage.calls:
            self.usage = self.usage + usage
            await self.events.emit(UsageRecorded(run_id=self.run_id, source=source,
                                                 usage=usage, total=self.usage))

    async def _fail(self, stage: Stage, reason: str) -> None:
        log.warning("run %s failed at %s: %s", self.run_id, stage, reason)
        await self.events.emit(RunFailed(run_id=self.run_id, reason=reason,
                                         stage=stage, usage=self.usage))


async def _numbered(lines: AsyncIterator[str]) -> AsyncIterator[tuple[int, str]]:
    number = 0
    async for line in lines:
        number += 1
        yield number, line


def _parse_step(number: int, line: str) -> Step | None:
    """A plan line as a Step; None for blank lines and code fences; else a clear error."""
    text = line.strip()
    if not text or text.startswith("```"):
        return None
    try:
        return msgspec.json.decode(text, type=Step)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise PlanValidationError(
            f"plan line {number} is not a valid step ({exc}): {text[:200]!r}. Write one JSON "
            "object per line with id, role, and either tool+args or instruction.") from exc
