"""A run's state to and from its KV record (``protocols.RunRecord``).

The planner writes the record after every change that an acknowledgement depends on,
so a planner that takes the run over resumes exactly where the last one stopped.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field

from protocols import ObjectRef, RunRecord, Step, StepRecord, Usage
from runtime.scheduler import Scheduler, StepState

_STATUS = {StepState.PENDING: "pending", StepState.READY: "ready",
           StepState.RUNNING: "running", StepState.DONE: "done", StepState.FAILED: "failed"}
_STATE = {v: k for k, v in _STATUS.items()}


@dataclass
class StepMeta:
    """What the planner knows about a step beyond the DAG state."""

    round: int
    executor: str = ""
    """The claimant of the current attempt with the highest delivery count."""
    delivery: int = 0
    review_output: str | None = None
    feedback: str = ""
    output_ref: ObjectRef | None = None
    """Where a long output is kept (the record holds only this reference)."""


@dataclass
class RunState:
    """Everything a Run persists, besides the scheduler itself."""

    record: RunRecord
    scheduler: Scheduler
    meta: dict[int, StepMeta] = field(default_factory=dict)


INLINE = 2048
"""Outputs longer than this are kept in the object store; the record holds a reference."""


async def restore(
    record: RunRecord, *, known_roles: Collection[str], known_tools: Collection[str],
    fetch: Callable[[ObjectRef], Awaitable[bytes]],
) -> RunState:
    async def text(r: StepRecord) -> str:
        if r.status != "done":
            return r.error
        if r.output_ref is not None:
            return (await fetch(r.output_ref)).decode()
        return r.output or ""

    steps = [(r.step, r.round, _STATE[r.status], r.attempt, await text(r)) for r in record.steps]
    scheduler = Scheduler.restore(
        known_roles=known_roles, known_tools=known_tools, max_steps=record.request.max_steps,
        round=record.round, closed=record.plan_closed, steps=steps, dropped=record.dropped)
    meta = {r.step.id: StepMeta(r.round, r.executor, r.delivery, r.review_output, r.feedback,
                                r.output_ref) for r in record.steps}
    return RunState(record, scheduler, meta)


def snapshot(
    base: RunRecord, scheduler: Scheduler, meta: dict[int, StepMeta], *, plan_closed: bool,
    synthesis_round: int, next_seq: int, usage: Usage, owner: str, lease_until: float,
    round_reason: str,
) -> RunRecord:
    records = []
    for step in scheduler.steps:
        state = scheduler.state(step.id)
        m = meta[step.id]
        done = state is StepState.DONE
        records.append(StepRecord(
            step=step, round=m.round, status=_STATUS[state],  # type: ignore[arg-type]
            attempt=scheduler.attempt(step.id),
            output=scheduler.results.get(step.id) if done and m.output_ref is None else None,
            output_ref=m.output_ref if done else None,
            error=scheduler.failures.get(step.id, ""), executor=m.executor,
            delivery=m.delivery, review_output=m.review_output, feedback=m.feedback,
        ))
    return RunRecord(
        run_id=base.run_id, request=base.request, status=base.status, owner=owner,
        lease_until=lease_until, round=scheduler.round, plan_closed=plan_closed,
        synthesis_round=synthesis_round, steps=records, dropped=sorted(scheduler.dropped),
        next_seq=next_seq, usage=usage, outcome=base.outcome, round_reason=round_reason,
        started_at=base.started_at, updated_at=time.time(),
    )


def accepted_in_round(scheduler: Scheduler, meta: dict[int, StepMeta]) -> list[Step]:
    """The current round's steps so far (a resumed planner continues the plan after them)."""
    return [s for s in scheduler.steps if meta[s.id].round == scheduler.round]
