"""A step's transitions: dispatched, done, failed, forgotten. Every policy calls down here.

A ready step is dispatched unless its approval gate holds it (``gates``); its task carries
the inputs it needs, and a tool step its arguments resolved. After a takeover, the tasks
the log shows dispatched are sent again, under the message ids they had, once their
inputs are known again. A step done dispatches the steps it made ready; a failed one is
retried, or fails for good (and may end the run). Attempts given up take their queued
tasks (and a sub-team's child run) back. The callers hold the run's ``lock``.
"""

from __future__ import annotations

import logging
import time

import msgspec

from protocols import (
    RunCancel,
    Step,
    StepAwaitingApproval,
    StepDispatched,
    StepFailed,
    StepFinished,
    StepStop,
    StepTask,
    Stream,
    Verb,
    cancel_id,
    state_space,
    stream_name,
)
from runtime.dag import StepState

from . import delegation, effects, gates
from ._api import RunOps
from .resume import task_id
from .state import INLINE, PREVIEW, RunFailure

log = logging.getLogger(__name__)


async def dispatch(run: RunOps, steps: list[Step]) -> None:
    """Send the steps out, those their approval gate does not hold."""
    now = time.time()
    for step in steps:
        attempt = run.scheduler.attempt(step.id)
        why = gates.why_held(run, step, attempt)
        if why:
            await _hold(run, step, attempt, why)
            continue  # ready, waiting for a person's approval
        run.scheduler.start(step.id)
        run.meta[step.id].new_attempt(now)
        await send_step(run, step, attempt,
                        task_id(run.env.nonces, run.run_id, step.id, attempt, run.fence),
                        fresh=True)
        await run.events.emit(StepDispatched(run_id=run.run_id, step_id=step.id,
                                             role=step.role, attempt=attempt))


async def _hold(run: RunOps, step: Step, attempt: int, why: str) -> None:
    """Keep the attempt at its gate; the first time, the gate is announced."""
    if run.gates.get(step.id, (0, 0.0))[0] != attempt:
        deadline = time.time() + run.env.team.timeouts.approval
        run.gates[step.id] = (attempt, deadline)
        await run.events.emit(StepAwaitingApproval(
            run_id=run.run_id, step_id=step.id, attempt=attempt, role=step.role, reason=why,
            deadline=deadline))


async def send_step(run: RunOps, step: Step, attempt: int, msg_id: str, *,
                    fresh: bool = False) -> None:
    """Send a step's task; ``fresh``: its id was never used (a first dispatch), not the
    id a previous owner may have stored it under (a re-send after a takeover)."""
    if step.tool is not None:
        args = run.scheduler.resolve_args(step)
        sent = step if args is step.args else msgspec.structs.replace(step, args=args)
        inputs = run.scheduler.code_inputs(step)
    else:
        sent, inputs = step, run.scheduler.inputs_for(step)
    task = StepTask(run_id=run.run_id, goal=run.request.goal, step=sent, attempt=attempt,
                    inputs=inputs, feedback=run.meta[step.id].feedback,
                    timeout=run.env.team.step_timeout(step.role, step.timeout),
                    deadline=run.record.deadline,
                    nonce=run.env.nonces.task(run.run_id, step.id, attempt),
                    **effects.task_fields(run, step, attempt))
    meta = run.meta[step.id]
    meta.task_id, meta.task_seq = msg_id, 0
    run.touch(step.id)
    await run.send(run.env.bus.subject(Verb.STEP, step.role), task, msg_id=msg_id,
                   step_id=step.id, fresh=fresh)


async def republish_ready(run: RunOps) -> None:
    """Send again the tasks the log shows dispatched whose inputs are known again."""
    for sid, msg_id in list(run.republish.items()):
        if run.state_of(sid) is not StepState.RUNNING:
            del run.republish[sid]
        elif all(run.state_of(d) is StepState.DONE
                 for d in run.scheduler.dependencies(sid)):
            del run.republish[sid]
            await send_step(run, run.scheduler.step(sid), run.scheduler.attempt(sid), msg_id)


async def forget(run: RunOps, step_ids: list[int], reason: str) -> None:
    """Take back the attempts given up: delete their queued tasks, so no executor runs
    them late, and tell the executors running them to stop (``reason``)."""
    await _cancel_children(run, step_ids, "the parent run gave the step up")
    bus = run.env.bus
    work = stream_name(bus.prefix, Stream.WORK)
    for sid in step_ids:
        meta = run.meta.get(sid)
        if meta is not None and meta.task_seq:
            await bus.delete(work, meta.task_seq)
        if run.state_of(sid) is StepState.RUNNING:
            await _stop(run, run.scheduler.step(sid), run.scheduler.attempt(sid), reason)


async def _stop(run: RunOps, step: Step, attempt: int, reason: str) -> None:
    """Tell the executors of the step's role to stop the attempt (best effort: one that
    does not hear it runs the attempt to its end, and its result is refused)."""
    bus = run.env.bus
    stop = StepStop(run_id=run.run_id, step_id=step.id, attempt=attempt, reason=reason,
                    nonce=run.env.nonces.task(run.run_id, step.id, attempt))
    try:
        await bus.publish(bus.subject(Verb.STOP, step.role), stop)
    except Exception as exc:
        log.info("run %s: could not tell %s to stop step %d (%s)", run.run_id, step.role,
                 step.id, exc)


async def _cancel_children(run: RunOps, step_ids: list[int], reason: str) -> None:
    """Cancel the child runs of the running attempts the run is giving up. A child that has
    ended already is not changed; one that cannot be told ends by its own deadline (the
    step's timeout), so a failure here is logged, never raised."""
    bus = run.env.bus
    for sid in step_ids:
        child = delegation.child_of(run, sid)
        if not child:
            continue
        cancel = RunCancel(run_id=child, reason=reason, source=f"run {run.run_id}")
        try:
            await bus.publish_durable(
                bus.subject(Verb.RESULT, child, run.env.name), cancel,
                msg_id=cancel_id(child))
        except Exception as exc:
            log.warning("run %s: could not cancel child run %s (%s); it ends by its own "
                        "deadline", run.run_id, child, exc)


async def step_done(run: RunOps, step: Step, attempt: int, output: str, executor: str,
                    duration: float) -> None:
    """The attempt's output stands: the steps it made ready go out."""
    if len(output) > INLINE:  # keep the run record small
        run.meta[step.id].output_ref = await run.env.bus.put_object(
            state_space(run.run_id), output.encode())
    ready = run.scheduler.complete(step.id, output)
    run.touch(step.id)
    preview = output if len(output) <= PREVIEW else output[:PREVIEW] + "…"
    await run.events.emit(StepFinished(run_id=run.run_id, step_id=step.id,
                                       attempt=attempt, output=preview,
                                       executor=executor, duration=max(duration, 0.0)))
    await dispatch(run, ready)
    await republish_ready(run)
    round_over(run)


async def step_failed(run: RunOps, step: Step, attempt: int, error: str, retry: bool,
                      cause: str, *, interrupted: bool = False) -> None:
    """The attempt failed: the step is dispatched again (``retry``) or fails for good.
    ``interrupted``: it may have acted without saying so (also implied by its ``cause``),
    which a step that must not act twice does not forget (``effects``)."""
    error, retry, cause = effects.after_failure(run, step, attempt, error, retry, cause,
                                                interrupted)
    run.touch(step.id)
    await run.events.emit(StepFailed(run_id=run.run_id, step_id=step.id, attempt=attempt,
                                     error=error, will_retry=retry, cause=cause))
    run.meta[step.id].review_output = None
    if retry:
        run.scheduler.retry(step.id)
        await dispatch(run, [step])
    else:
        run.scheduler.fail(step.id, error)
        check_abort(run)
        round_over(run)


def round_over(run: RunOps) -> None:
    """Wake the run if its round's plan is closed and every step has ended."""
    if run.scheduler.closed and run.scheduler.is_done():
        run.notify()


def check_abort(run: RunOps) -> None:
    """A failed step whose ``on_failure`` is ``abort`` ends the run now."""
    for sid, error in run.scheduler.failures.items():
        if run.scheduler.step(sid).on_failure == "abort":
            run.abort(RunFailure("execute", f"step {sid} failed and its on_failure is "
                                 f"\"abort\": {error}", "step_failed"))
