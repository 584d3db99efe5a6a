"""One plan round: stream the planner model's JSON Lines into the run's DAG.

Each line is validated as it arrives and its step dispatched as soon as it is ready, while
the model is still writing the rest (LLMCompiler). A line that breaks a rule, a stream cut
short (``max_tokens``), or a plan that takes longer than ``[timeouts] plan`` rejects the
attempt: the model is asked again with the error, keeping the steps already dispatched.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import anyio.abc
import msgspec

from protocols import UNREADABLE, PlanFinished, PlanRejected, PlanStarted, Step, StepPlanned, Usage
from runtime import telemetry
from runtime.client import check_tool_allowed
from runtime.dag import PlanValidationError, StepState
from runtime.models import (
    TEXT_CHARS,
    ChatMessage,
    Constraint,
    LineStream,
    drop_nulls,
    plan_constraint,
    plan_shape,
)

from .. import prompts
from . import delegation, review
from ._api import RunOps
from .state import RunFailure, StepMeta, accepted_in_round, shaped
from .steps import dispatch, round_over

SAVE_EVERY, SAVE_PERIOD = 64, 0.05
"""While a plan streams, the run's state is saved after at most this many steps or this
many seconds: a model writing a line every few hundred ms gets a save per line, a plan
that arrives all at once one per batch. The events say the rest: a planner taking the
run over folds the steps planned and dispatched after the last save from the run's events
(``resume.fold``)."""


GIVEN_PLAN = "given plan"
"""The model a PlanStarted names when the run's request carried its first plan."""


async def plan_round(run: RunOps, round_: int, reason: str) -> None:
    """Stream the plan into the scheduler, asking again after an invalid plan."""
    if round_ == 0 and run.request.plan is not None:
        await _given_plan(run, run.request.plan)
        return
    if run.holding and await review.resume_round(run, round_):
        await _close(run, round_, len(accepted_in_round(run.scheduler, run.meta)))
        return
    accepted = accepted_in_round(run.scheduler, run.meta)
    error = ""
    team, model = run.env.team, run.env.model
    for attempt in range(1, team.plan_attempts + 1):
        await run.events.emit(PlanStarted(run_id=run.run_id, round=round_,
                                          model=model.settings.model))
        constraint = _constraint(run, accepted)
        content = prompts.planner_request(
            run.request.goal, delegation.roles(run), run.env.tools, first_id=_next_id(run),
            done=run.scheduler.results, done_steps={s.id: s for s in run.scheduler.steps},
            reason=reason, accepted=accepted, error=error,
            as_object=constraint is not None and constraint.framing == "steps",
        )
        messages: list[ChatMessage] = [
            {"role": "system", "content": delegation.planner_system_prompt(run)},
            {"role": "user", "content": content}]
        try:
            with telemetry.plan_span(run.run_id, run.env.name, round_, attempt) as span:
                steps = await _traced_attempt(run, round_, messages, accepted, span,
                                              constraint)
            if run.holding:
                review.check_complete(run)
                await review.await_approval(run, round_)
                steps = len(accepted_in_round(run.scheduler, run.meta))
            await _close(run, round_, steps)
            return
        except PlanValidationError as exc:
            error = str(exc)
            async with run.lock:
                # Keep what was dispatched (it may be running); forget steps that never
                # started, so the corrected plan can redo them.
                for sid in run.scheduler.discard_pending():
                    del run.meta[sid]
                accepted = accepted_in_round(run.scheduler, run.meta)
            await run.save()
            await run.events.emit(PlanRejected(
                run_id=run.run_id, round=round_, error=error,
                retrying=attempt < team.plan_attempts))
    raise RunFailure("plan", f"the plan was invalid {team.plan_attempts} time(s); "
                             f"last error: {error}", "plan")


async def _traced_attempt(run: RunOps, round_: int, messages: list[ChatMessage],
                          accepted: list[Step], span: telemetry.SpanLike,
                          constraint: Constraint | None) -> int:
    """One streamed plan within its deadline; the number of steps the round has now."""
    team, model = run.env.team, run.env.model
    lines = model.stream_lines(messages, constraint=constraint)
    try:
        with anyio.move_on_after(team.timeouts.plan) as deadline:
            steps = await _stream(run, round_, lines, accepted)
        if deadline.cancelled_caught:
            raise PlanValidationError(
                f"the planner's model did not finish the plan within "
                f"{team.timeouts.plan:g}s ([timeouts] plan); ask for fewer steps or raise "
                "the timeout")
    except PlanValidationError as exc:
        span.fail("plan_rejected", str(exc))
        raise
    finally:
        span.model(model.settings.model, "", lines.usage or Usage(), [lines.finish_reason or ""])
        if span.capture:
            span.content("gen_ai.input.messages", msgspec.json.encode(messages).decode())
            span.content("gen_ai.output.messages", lines.text)
    span.set("plancast.steps", steps)
    return steps


async def _close(run: RunOps, round_: int, steps: int) -> None:
    """The round's plan is complete: every dependency must name a declared step."""
    async with run.lock:
        run.scheduler.close_plan()
        run.plan_closed = True
        await run.events.emit(PlanFinished(run_id=run.run_id, round=round_, steps=steps))
        round_over(run)
    await run.save()


async def _given_plan(run: RunOps, steps: list[Step]) -> None:
    """The request's own first plan (a saved plan): no model call. The planner checked it
    when it took the run on, so a step it now refuses fails the run, with no retry."""
    await run.events.emit(PlanStarted(run_id=run.run_id, round=0, model=GIVEN_PLAN))
    try:
        out = False
        for step in steps:
            if step.id not in run.meta:  # a planner taking the run over may find some
                await _accept(run, 0, step)
                out = out or _out_now(run, step)
        if run.holding:  # a reviewed run reviews a given plan too
            review.check_complete(run)
            await review.await_approval(run, 0)
        await _close(run, 0, len(steps))
    except PlanValidationError as exc:
        raise RunFailure("plan", f"the given plan is invalid: {exc}", "plan") from exc


class SaveBehind:
    """The run's state saved while a plan streams, without holding up the next line. A
    save first waits for every task sent so far to be stored: made in line, it held the
    plan for a third of a 1,000-line plan's time. At most one save runs and one waits; a
    save that fails stops the plan with its error, as if it had been made in line."""

    def __init__(self, run: RunOps, group: anyio.abc.TaskGroup) -> None:
        self.run, self.group = run, group
        self.running = self.again = False
        self.error: Exception | None = None

    def want(self) -> None:
        if self.error is not None:
            raise self.error
        if self.running:
            self.again = True
            return
        self.running = True
        self.group.start_soon(self._save)

    async def _save(self) -> None:
        try:
            while True:
                self.again = False
                await self.run.save()
                if not self.again:
                    return
        except Exception as exc:
            self.error = exc
            self.group.cancel_scope.cancel()
        finally:
            self.running = False


async def _stream(run: RunOps, round_: int, stream: LineStream, accepted: list[Step]) -> int:
    """Feed one streamed plan to the run; the number of steps the round has now."""
    failure: Exception | None = None
    count = 0
    async with anyio.create_task_group() as group:
        saves = SaveBehind(run, group)
        if run.never_saved:  # a fresh run: saved while the model writes its first line
            saves.want()
        try:
            count = await _read(run, round_, stream, accepted, saves)
        except Exception as exc:  # raised as it is, not in the group's ExceptionGroup
            failure = exc
            group.cancel_scope.cancel()
    failure = failure or saves.error
    if failure is not None:
        raise failure
    return count


async def _read(run: RunOps, round_: int, stream: LineStream, accepted: list[Step],
                saves: SaveBehind) -> int:
    # Dispatch steps while the plan streams (LLMCompiler); off waits for the whole plan.
    streaming = bool(run.env.config.options.get("stream_plan", True))
    held: list[Step] = []  # with streaming off, steps wait for the whole plan
    seen = {s.id: shaped(s) for s in accepted}  # a re-asked model may repeat a step
    unsaved, saved_at = 0, anyio.current_time()
    out = False

    async def accept(step: Step) -> None:
        nonlocal unsaved, saved_at, out
        await _accept(run, round_, step)
        out = out or _out_now(run, step)
        accepted.append(step)
        unsaved += 1
        if unsaved >= SAVE_EVERY or anyio.current_time() - saved_at >= SAVE_PERIOD:
            saves.want()
            unsaved, saved_at = 0, anyio.current_time()
    try:
        async with stream as lines:
            async for number, line in _numbered(lines):
                step = _parse_step(number, line, stream.framing)
                if step is not None and step.args and stream.framing == "steps":
                    step = _without_strict_nulls(run, step)
                if step is None or seen.get(step.id) == (form := shaped(step)):
                    continue
                seen[step.id] = form
                if streaming:
                    with anyio.CancelScope(shield=True):  # a timeout stops the model only
                        await accept(step)
                else:
                    held.append(step)
    finally:  # once closed, a rejected, cut or timed-out plan's call is counted too
        with anyio.CancelScope(shield=True):
            await run.spent("planner", stream.usage or Usage())
    _check_complete(stream, len(seen))
    for step in held:
        await accept(step)
    return len(accepted)


def _constraint(run: RunOps, accepted: list[Step]) -> Constraint | None:
    """What the planner's model may write now, in its server's dialect (built per request:
    the first id, the ids to depend on and the room left change with every attempt)."""
    options = run.env.config.options
    shape = plan_shape(run.env.team, run.env.tools, first_id=_next_id(run),
                       prior=[s.id for s in run.scheduler.steps],
                       max_steps=run.scheduler.steps_left, min_steps=0 if accepted else 1,
                       text_chars=options.get("plan_text_chars", TEXT_CHARS),
                       allowed=delegation.roles(run))
    return plan_constraint(run.env.model.settings.structured, shape)


def _without_strict_nulls(run: RunOps, step: Step) -> Step:
    """A strict schema made the model write ``null`` for optional arguments it left unset."""
    tools = run.env.tools
    schema = tools.get(step.tool).parameters if step.tool and step.tool in tools else None
    return msgspec.structs.replace(step, args=drop_nulls(step.args, schema))


def _check_complete(lines: LineStream, count: int) -> None:
    """A plan counts only if the model said it was done writing it."""
    if lines.finish_reason == "stop":
        return
    if lines.finish_reason == "length":
        why = "the model hit its max_tokens limit (finish_reason \"length\")"
    elif lines.finish_reason is None:
        why = "the model's stream ended without a finish reason (the connection was cut?)"
    else:
        why = f"the model stopped with finish_reason {lines.finish_reason!r}"
    raise PlanValidationError(
        f"the plan was cut off after {count} step(s): {why}. Raise max_tokens for the "
        "planner's model, or write fewer and shorter steps.")


async def _accept(run: RunOps, round_: int, step: Step) -> None:
    async with run.lock:
        if run.holding:  # it runs once the round is approved
            await review.accept_held(run, round_, step)
            return
        check_tool_allowed(run.env.team, step, run.env.known_tools)
        ready = run.scheduler.add(step)
        run.meta[step.id] = StepMeta(round_, planned_seq=run.events.next_seq)
        run.touch(step.id)
        # Subscribers see the real DAG: $N references count as dependencies.
        await run.events.emit(StepPlanned(run_id=run.run_id, round=round_, step=shaped(step)))
        await dispatch(run, ready)


def _out_now(run: RunOps, step: Step) -> bool:
    """Write the step's task at once if it was dispatched (True). The plan's lines that came
    in the same read are all handled in this event-loop turn, and what it sent would go out
    only once they are: the first step of a 100-line plan that came at once started 3 ms
    late. Only the round's first: written one by one, a 1,000-step plan took longer."""
    if run.state_of(step.id) is not StepState.RUNNING:
        return False
    run.env.bus.write_now()
    return True


def _next_id(run: RunOps) -> int:
    """The first id a new plan may use: dropped steps' ids stay taken."""
    return max((*(s.id for s in run.scheduler.steps), *run.scheduler.dropped), default=0) + 1


async def _numbered(lines: AsyncIterator[str]) -> AsyncIterator[tuple[int, str]]:
    number = 0
    async for line in lines:
        number += 1
        yield number, line


def _parse_step(number: int, line: str, framing: str = "lines") -> Step | None:
    """A plan line (or an element of the steps array) as a Step; None for blank lines and
    code fences; else a clear error."""
    text = line.strip()
    if not text or text.startswith("```"):
        return None
    try:
        return msgspec.json.decode(text, type=Step)
    except UNREADABLE as exc:
        where, how = (f"step {number} of the steps array", "Write each step as a JSON object "
                      "in the steps array") if framing == "steps" else (
                      f"plan line {number}", "Write one JSON object per line")
        raise PlanValidationError(
            f"{where} is not a valid step ({exc}): {text[:200]!r}. {how} with id, role, and "
            "either tool+args or instruction.") from exc
