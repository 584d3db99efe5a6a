"""The life of one run, owned by a planner: plan (streamed), dispatch, review, join, replan.

Every state change goes through ``_lock`` so results arriving while the plan is still
streaming see a consistent DAG, and every change is an event, in order.
"""

from __future__ import annotations

import contextlib
import logging
import time
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
from runtime.bus import Unsettled
from runtime.errors import ModelError, PlanValidationError, StepStateError
from runtime.events import EventLog
from runtime.scheduler import StepState

from . import prompts, run_state
from .run_state import LostRun, RunState, StepMeta, accepted_in_round

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
    """One run, driven by the planner that holds its lease."""

    def __init__(self, planner: Planner, state: RunState, revision: int) -> None:
        self.planner = planner
        self.bus = planner.bus
        self.team = planner.ctx.team
        record = state.record
        self.run_id = record.run_id
        self.request = record.request
        self.record = record
        self.scheduler = state.scheduler
        self.meta = state.meta
        self.events = EventLog(self.bus, self.run_id, next_seq=record.next_seq)
        self.stream_plan = bool(planner.config.options.get("stream_plan", True))
        """Dispatch steps while the plan streams (LLMCompiler); off waits for the whole plan."""
        self.usage = record.usage
        self.plan_closed = record.plan_closed
        self.synthesis_round = record.synthesis_round
        self.round_reason = record.round_reason
        self.store = run_state.RunStore(planner.kv, self.run_id, revision,
                                        retry_for=self.bus.settings.publish_retry_for)
        self._touched: set[int] = set(self.meta)  # steps whose records need writing
        self._unsettled: list[Unsettled] = []  # tasks sent, storage not yet confirmed
        self._saved = self._version = 0
        self._save_lock = anyio.Lock()
        self._lock = anyio.Lock()
        self._round_over = anyio.Event()
        self._replan: ReplanRequest | None = None
        self._decision: SynthesisDecision | None = None
        self._decided = anyio.Event()
        self.scope = anyio.CancelScope()
        """Cancelled when the run is lost to another planner."""

    # -- the run, top to bottom ----------------------------------------------------------

    async def drive(self, *, resumed: bool = False) -> None:
        req = self.request
        if not resumed:
            await self.events.emit(RunStarted(
                run_id=self.run_id, goal=req.goal,
                planner=f"{self.planner.name}/{self.planner.instance}"))
            await self.save()
        try:
            while True:
                round_ = self.scheduler.round
                if not self.plan_closed:
                    await self._plan(round_, self.round_reason)
                else:
                    async with self._lock:  # a resumed run: send what was ready, then wait
                        await self._dispatch(self.scheduler.ready())
                        self._check_round_over()
                await self._round_over.wait()
                reason, source = self._why_replan()
                if not reason:
                    decision = await self._synthesize(req.max_replans - round_)
                    if decision.action == "finish":
                        await self._finish(decision.answer)
                        return
                    reason, source = decision.reason or "the synthesizer asked", "synthesizer"
                if round_ >= req.max_replans:
                    raise RunFailure("execute", f"no replans left; last reason: {reason}")
                async with self._lock:
                    self.scheduler.new_round()
                    self.plan_closed, self.round_reason = False, reason
                    await self.events.emit(ReplanStarted(run_id=self.run_id, round=round_ + 1,
                                                         reason=reason, source=source))
                await self.save()
        except LostRun:
            log.warning("run %s was taken over by another planner; stopping here", self.run_id)
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
        accepted = accepted_in_round(self.scheduler, self.meta)
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
                seen = {s.id: s for s in accepted}  # a re-asked model may repeat a step
                async with model.stream_lines(messages) as lines:
                    try:
                        async for number, line in _numbered(lines):
                            step = _parse_step(number, line)
                            if step is None or seen.get(step.id) == step:
                                continue
                            seen[step.id] = step
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
                    self.plan_closed = True
                    await self.events.emit(PlanFinished(run_id=self.run_id, round=round_,
                                                        steps=len(accepted)))
                    self._check_round_over()
                await self.save()
                return
            except PlanValidationError as exc:
                error = str(exc)
                async with self._lock:
                    # Keep what was dispatched (it may be running); forget steps that never
                    # started, so the corrected plan can redo them.
                    for sid in self.scheduler.discard_pending():
                        del self.meta[sid]
                    accepted = accepted_in_round(self.scheduler, self.meta)
                await self.save()
                await self.events.emit(PlanRejected(
                    run_id=self.run_id, round=round_, error=error,
                    retrying=attempt < self.team.plan_attempts))
        raise RunFailure("plan", f"the plan was invalid {self.team.plan_attempts} time(s); "
                                 f"last error: {error}")

    async def _accept(self, round_: int, step: Step) -> None:
        async with self._lock:
            self._check_tool_allowed(step)
            ready = self.scheduler.add(step)
            self.meta[step.id] = StepMeta(round_)
            self._touched.add(step.id)
            # Subscribers see the real DAG: $N references count as dependencies.
            shown = msgspec.structs.replace(
                step, depends_on=sorted(self.scheduler.dependencies(step.id)))
            await self.events.emit(StepPlanned(run_id=self.run_id, round=round_, step=shown))
            await self._dispatch(ready)
        await self.save()

    async def _dispatch(self, steps: list[Step]) -> None:
        for step in steps:
            self.scheduler.start(step.id)
            self._touched.add(step.id)
            attempt = self.scheduler.attempt(step.id)
            if step.tool is not None:
                sent = msgspec.structs.replace(step, args=self.scheduler.resolve_args(step))
                inputs: dict[int, str] = {}
            else:
                sent, inputs = step, self.scheduler.inputs_for(step)
            task = StepTask(run_id=self.run_id, goal=self.request.goal, step=sent,
                            attempt=attempt, inputs=inputs,
                            feedback=self.meta[step.id].feedback)
            self._unsettled.append(await self.bus.publish_soon(
                self.bus.subject(Verb.STEP, step.role), task,
                msg_id=f"{self.run_id}/{step.id}/{attempt}"))
            await self.events.emit(StepDispatched(run_id=self.run_id, step_id=step.id,
                                                  role=step.role, attempt=attempt))

    async def _synthesize(self, replans_left: int) -> SynthesisDecision:
        self._decided = anyio.Event()
        self.synthesis_round = self.scheduler.round
        await self.save()
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
        """Apply an outcome; returns once the new state is stored (so it may be acked)."""
        async with self._lock:
            match message:
                case StepClaimed():
                    await self._on_claim(message)
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
                    await self._on_replan_request(message)
        if not isinstance(message, StepClaimed):  # a claim only fences; not worth a write
            await self.save()

    async def _on_replan_request(self, request: ReplanRequest) -> None:
        """A step that could not be run (dead-lettered) fails for good; else replan now."""
        if request.failed_step is None:
            self._replan = request
            self._round_over.set()
            return
        sid = request.failed_step
        if self._state_of(sid) in (StepState.RUNNING, StepState.READY):
            await self._step_failed(self.scheduler.step(sid), self.scheduler.attempt(sid),
                                    f"{request.source}: {request.reason}", retry=False)

    async def _on_claim(self, claim: StepClaimed) -> None:
        """The latest delivery's claimant owns the attempt: outcomes from others are stale."""
        meta = self.meta.get(claim.step_id)
        if meta is None or not self._current(claim.step_id, claim.attempt) \
                or claim.delivery < meta.delivery:
            return
        meta.executor, meta.delivery = claim.executor, claim.delivery
        self._touched.add(claim.step_id)
        await self.events.emit(StepStarted(run_id=self.run_id, step_id=claim.step_id,
                                           attempt=claim.attempt, executor=claim.executor))

    async def _on_result(self, result: StepResult) -> None:
        meta = self.meta.get(result.step_id)
        if meta is None or not self._current(result.step_id, result.attempt) \
                or (meta.executor and result.executor != meta.executor):
            log.info("run %s: stale result for step %d attempt %d from %s ignored",
                     self.run_id, result.step_id, result.attempt, result.executor)
            return
        await self._spent(f"step:{result.step_id}", result.usage)
        meta.usage = meta.usage + result.usage
        self._touched.add(result.step_id)
        step = self.scheduler.step(result.step_id)
        if not result.ok:
            retry = result.retryable and result.attempt < self.team.step_attempts
            await self._step_failed(step, result.attempt, result.error, retry)
            return
        output = result.output or ""
        if step.review and meta.review_output is None:
            meta.review_output = output
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
        meta = self.meta.get(verdict.step_id)
        if meta is None or meta.review_output is None \
                or not self._current(verdict.step_id, verdict.attempt):
            return
        await self._spent(f"critic:{verdict.step_id}", verdict.usage)
        meta.usage = meta.usage + verdict.usage
        self._touched.add(verdict.step_id)
        await self.events.emit(CriticVerdict(
            run_id=self.run_id, step_id=verdict.step_id, attempt=verdict.attempt,
            approved=verdict.approved, critique=verdict.critique))
        step = self.scheduler.step(verdict.step_id)
        output, meta.review_output = meta.review_output, None
        if verdict.approved:
            await self._step_done(step, verdict.attempt, output, "", 0.0)
            return
        meta.feedback = verdict.critique
        retry = verdict.attempt < self.team.review_attempts
        await self._step_failed(step, verdict.attempt,
                                f"rejected by the critic: {verdict.critique}", retry)

    async def _step_done(self, step: Step, attempt: int, output: str, executor: str,
                         duration: float) -> None:
        if len(output) > run_state.INLINE:  # keep the run record small
            self.meta[step.id].output_ref = await self.bus.put_object(
                f"out/{self.run_id}/{step.id}/{attempt}", output.encode())
        ready = self.scheduler.complete(step.id, output)
        self._touched.add(step.id)
        preview = output if len(output) <= PREVIEW else output[:PREVIEW] + "…"
        await self.events.emit(StepFinished(run_id=self.run_id, step_id=step.id,
                                            attempt=attempt, output=preview,
                                            executor=executor, duration=max(duration, 0.0)))
        await self._dispatch(ready)
        self._check_round_over()

    async def _step_failed(self, step: Step, attempt: int, error: str, retry: bool) -> None:
        self._touched.add(step.id)
        await self.events.emit(StepFailed(run_id=self.run_id, step_id=step.id, attempt=attempt,
                                          error=error, will_retry=retry))
        if retry:
            self.scheduler.retry(step.id)
            meta = self.meta[step.id]
            meta.executor, meta.delivery = "", 0
            await self._dispatch([step])
        else:
            self.scheduler.fail(step.id, error)
            self._check_round_over()

    # -- helpers -------------------------------------------------------------------------

    def _state_of(self, step_id: int) -> StepState | None:
        """The step's state; None for ids not in the current plan (dropped or never seen)."""
        try:
            return self.scheduler.state(step_id)
        except StepStateError:
            return None

    def _current(self, step_id: int, attempt: int) -> bool:
        """Is this the outcome we wait for? Stale attempts and dropped steps are not."""
        return self._state_of(step_id) is StepState.RUNNING \
            and self.scheduler.attempt(step_id) == attempt

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
        if step.tool not in self.planner.known_tools:
            return  # an unknown tool (or none): the scheduler says which tools exist
        if role is not None and step.tool is not None and step.tool not in role.tools:
            raise PlanValidationError(
                f"step {step.id}: role {step.role!r} may not use tool {step.tool!r}; "
                f"its tools are: {', '.join(role.tools) or 'none'}. Assign the step to a role "
                "that has the tool.", step_id=step.id)

    def _next_id(self) -> int:
        """The first id a new plan may use: dropped steps' ids stay taken."""
        return max((*(s.id for s in self.scheduler.steps), *self.scheduler.dropped),
                   default=0) + 1

    async def _spent(self, source: str, usage: Usage) -> None:
        if usage.calls:
            self.usage = self.usage + usage
            await self.events.emit(UsageRecorded(run_id=self.run_id, source=source,
                                                 usage=usage, total=self.usage))

    async def _finish(self, answer: str) -> None:
        await self.events.emit(RunFinished(run_id=self.run_id, answer=answer, usage=self.usage))
        self.record = msgspec.structs.replace(self.record, status="finished", outcome=answer)
        await self.save()

    async def _fail(self, stage: Stage, reason: str) -> None:
        log.warning("run %s failed at %s: %s", self.run_id, stage, reason)
        await self.events.emit(RunFailed(run_id=self.run_id, reason=reason,
                                         stage=stage, usage=self.usage))
        self.record = msgspec.structs.replace(self.record, status="failed", outcome=reason)
        with contextlib.suppress(LostRun):
            await self.save()

    async def save(self) -> None:
        """Store what changed: the steps touched since the last save, then the header.

        The header is written with compare-and-set, so a planner that lost the run learns
        it here (``LostRun``). Concurrent callers share one write.
        """
        self._version += 1
        wanted = self._version
        async with self._save_lock:
            if self._saved >= wanted:
                return  # a write that started after our change already covered it
            # What the state says was sent must be stored before the state is.
            sent, self._unsettled = self._unsettled, []
            await self.events.flush()
            await self.bus.settle(sent)
            version = self._version
            touched, self._touched = self._touched, set()
            records = [run_state.step_record(self.scheduler, self.meta[sid], step)
                       for sid in touched
                       if (step := self._step_or_none(sid)) is not None]
            head = run_state.header(
                self.record, self.scheduler, plan_closed=self.plan_closed,
                synthesis_round=self.synthesis_round, next_seq=self.events.next_seq,
                usage=self.usage, owner=self.planner.owner_id,
                lease_until=time.time() + self.planner.lease, round_reason=self.round_reason)
            try:
                await self.store.write(head, records)
            except BaseException:
                self._touched |= touched  # written again next time
                raise
            self._saved = version

    def _step_or_none(self, step_id: int) -> Step | None:
        return self.scheduler.step(step_id) if self._state_of(step_id) is not None else None


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
