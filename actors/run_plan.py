"""One plan round: stream the planner model's JSON Lines into the run's DAG.

Each line is validated as it arrives and its step dispatched as soon as it is ready, while
the model is still writing the rest (LLMCompiler). A line that breaks a rule, a stream cut
short (``max_tokens``), or a plan that takes longer than ``[timeouts] plan`` rejects the
attempt: the model is asked again with the error, keeping the steps already dispatched.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import anyio
import msgspec

from protocols import PlanFinished, PlanRejected, PlanStarted, Step, StepPlanned, Usage
from protocols.codec import UNREADABLE
from runtime.errors import PlanValidationError
from runtime.llm import LineStream
from runtime.scheduler import references

from . import prompts
from .run_state import RunFailure, StepMeta, accepted_in_round

if TYPE_CHECKING:
    from .run import Run

SAVE_EVERY, SAVE_PERIOD = 64, 0.05
"""While a plan streams, the run's state is saved after at most this many steps or this
many seconds: a model writing a line every few hundred ms gets a save per line, a plan
that arrives all at once one per batch. The events say the rest: a planner taking the
run over folds the steps planned and dispatched after the last save from the run's events
(``resume.fold``), and nothing is acknowledged before a save covers it."""


async def plan_round(run: Run, round_: int, reason: str) -> None:
    """Stream the plan into the scheduler, asking again after an invalid plan."""
    accepted = accepted_in_round(run.scheduler, run.meta)
    error = ""
    team, model = run.team, run.planner.model
    for attempt in range(1, team.plan_attempts + 1):
        await run.events.emit(PlanStarted(run_id=run.run_id, round=round_,
                                          model=model.settings.model))
        content = prompts.planner_request(
            run.request.goal, team.executors(), run.planner.ctx.tools, first_id=_next_id(run),
            done=run.scheduler.results, done_steps={s.id: s for s in run.scheduler.steps},
            reason=reason, accepted=accepted, error=error,
        )
        messages = [{"role": "system",
                     "content": run.planner.config.system_prompt or prompts.PLANNER},
                    {"role": "user", "content": content}]
        try:
            with anyio.move_on_after(team.timeouts.plan) as deadline:
                steps = await _stream(run, round_, model.stream_lines(messages), accepted)
            if deadline.cancelled_caught:
                raise PlanValidationError(
                    f"the planner's model did not finish the plan within "
                    f"{team.timeouts.plan:g}s ([timeouts] plan); ask for fewer steps or raise "
                    "the timeout")
            async with run.lock:
                run.scheduler.close_plan()
                run.plan_closed = True
                await run.events.emit(PlanFinished(run_id=run.run_id, round=round_,
                                                   steps=steps))
                run.check_round_over()
            await run.save()
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


async def _stream(run: Run, round_: int, stream: LineStream, accepted: list[Step]) -> int:
    """Feed one streamed plan to the run; the number of steps the round has now."""
    held: list[Step] = []  # with streaming off, steps wait for the whole plan
    seen = {s.id: _shape(s) for s in accepted}  # a re-asked model may repeat a step
    unsaved, saved_at = 0, anyio.current_time()

    async def accept(step: Step) -> None:
        nonlocal unsaved, saved_at
        await _accept(run, round_, step)
        accepted.append(step)
        unsaved += 1
        if unsaved >= SAVE_EVERY or anyio.current_time() - saved_at >= SAVE_PERIOD:
            await run.save()
            unsaved, saved_at = 0, anyio.current_time()
    async with stream as lines:
        try:
            async for number, line in _numbered(lines):
                step = _parse_step(number, line)
                if step is None or seen.get(step.id) == _shape(step):
                    continue
                seen[step.id] = _shape(step)
                if run.stream_plan:
                    with anyio.CancelScope(shield=True):  # a timeout stops the model only
                        await accept(step)
                else:
                    held.append(step)
        finally:
            await run.spent("planner", lines.usage or Usage())
        _check_complete(lines, len(seen))
    for step in held:
        await accept(step)
    return len(accepted)


def _shape(step: Step) -> Step:
    """The step as its ``step.planned`` event shows it (``$N`` references counted among its
    dependencies): a step rebuilt from that event equals the model's line it came from."""
    return msgspec.structs.replace(
        step, depends_on=sorted(set(step.depends_on) | set(references(step.args))))


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


async def _accept(run: Run, round_: int, step: Step) -> None:
    async with run.lock:
        _check_tool_allowed(run, step)
        ready = run.scheduler.add(step)
        run.meta[step.id] = StepMeta(round_)
        run.touch(step.id)
        # Subscribers see the real DAG: $N references count as dependencies.
        await run.events.emit(StepPlanned(run_id=run.run_id, round=round_, step=_shape(step)))
        await run.dispatch(ready)


def _check_tool_allowed(run: Run, step: Step) -> None:
    role = run.team.roles.get(step.role)
    if step.tool not in run.planner.known_tools:
        return  # an unknown tool (or none): the scheduler says which tools exist
    if role is not None and step.tool is not None and step.tool not in role.tools:
        raise PlanValidationError(
            f"step {step.id}: role {step.role!r} may not use tool {step.tool!r}; "
            f"its tools are: {', '.join(role.tools) or 'none'}. Assign the step to a role "
            "that has the tool.", step_id=step.id)


def _next_id(run: Run) -> int:
    """The first id a new plan may use: dropped steps' ids stay taken."""
    return max((*(s.id for s in run.scheduler.steps), *run.scheduler.dropped), default=0) + 1


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
    except UNREADABLE as exc:
        raise PlanValidationError(
            f"plan line {number} is not a valid step ({exc}): {text[:200]!r}. Write one JSON "
            "object per line with id, role, and either tool+args or instruction.") from exc
