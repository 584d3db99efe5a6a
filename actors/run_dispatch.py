"""Sending a run's steps out as tasks, and taking back the tasks it gives up.

A ready step is dispatched unless its approval gate holds it (``step_gates``); its task
carries the inputs it needs, and a tool step its arguments resolved. After a takeover,
the tasks the log shows dispatched are sent again, under the message ids they had, once
their inputs are known again. The callers hold the run's ``lock``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import msgspec

from protocols import Step, StepDispatched, StepTask, Stream, Verb, stream_name
from runtime.dag import StepState

from . import delegation, step_gates
from .resume import task_id

if TYPE_CHECKING:
    from .run import Run


async def dispatch(run: Run, steps: list[Step]) -> None:
    now = time.time()
    for step in steps:
        attempt = run.scheduler.attempt(step.id)
        if await step_gates.hold(run, step, attempt):
            continue  # ready, waiting for a person's approval
        run.scheduler.start(step.id)
        run.meta[step.id].new_attempt(now)
        await send_step(run, step, attempt,
                        task_id(run.nonces, run.run_id, step.id, attempt, run.fence), fresh=True)
        await run.events.emit(StepDispatched(run_id=run.run_id, step_id=step.id,
                                             role=step.role, attempt=attempt))


async def send_step(run: Run, step: Step, attempt: int, msg_id: str, *,
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
                    timeout=run.team.step_timeout(step.role, step.timeout),
                    deadline=run.record.deadline,
                    nonce=run.nonces.task(run.run_id, step.id, attempt))
    meta = run.meta[step.id]
    meta.task_id, meta.task_seq = msg_id, 0
    run.touch(step.id)
    await run.send(run.bus.subject(Verb.STEP, step.role), task, msg_id=msg_id,
                   step_id=step.id, fresh=fresh)


async def republish_ready(run: Run) -> None:
    """Send again the tasks the log shows dispatched whose inputs are known again."""
    for sid, msg_id in list(run.republish.items()):
        if run.state_of(sid) is not StepState.RUNNING:
            del run.republish[sid]
        elif all(run.state_of(d) is StepState.DONE
                 for d in run.scheduler.dependencies(sid)):
            del run.republish[sid]
            await send_step(run, run.scheduler.step(sid), run.scheduler.attempt(sid), msg_id)


async def forget_tasks(run: Run, step_ids: list[int]) -> None:
    """Delete the queued tasks of attempts given up, so no executor runs them late."""
    await delegation.cancel_children(run, step_ids, "the parent run gave the step up")
    work = stream_name(run.bus.prefix, Stream.WORK)
    for sid in step_ids:
        meta = run.meta.get(sid)
        if meta is not None and meta.task_seq:
            await run.bus.delete(work, meta.task_seq)
