"""A run's state to and from the run-state bucket (see ``protocols.state``).

The planner writes the header and the records of the steps that changed before it
acknowledges any outcome, so a planner that takes the run over resumes exactly where
the last one stopped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from nats.js.errors import KeyWrongLastSequenceError

from protocols import (
    ObjectRef,
    RunRecord,
    Step,
    StepRecord,
    Usage,
    decode,
    encode,
    run_key,
    step_key,
)
from runtime.bus import TRANSIENT
from runtime.scheduler import Scheduler, StepState

log = logging.getLogger(__name__)

INLINE = 2048
"""Outputs longer than this are kept in the object store; the record holds a reference."""

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
    usage: Usage = field(default_factory=Usage)


@dataclass
class RunState:
    """A run as read back: its header, DAG and per-step knowledge."""

    record: RunRecord
    scheduler: Scheduler
    meta: dict[int, StepMeta] = field(default_factory=dict)


async def restore(
    record: RunRecord, steps: Mapping[int, StepRecord], *, known_roles: Collection[str],
    known_tools: Collection[str], fetch: Callable[[ObjectRef], Awaitable[bytes]],
) -> RunState:
    """Rebuild a run from its header and step records (fetching long outputs)."""
    async def text(r: StepRecord) -> str:
        if r.status != "done":
            return r.error
        if r.output_ref is not None:
            return (await fetch(r.output_ref)).decode()
        return r.output or ""

    ordered = [steps[sid] for sid in record.order if sid in steps]
    scheduler = Scheduler.restore(
        known_roles=known_roles, known_tools=known_tools, max_steps=record.request.max_steps,
        round=record.round, closed=record.plan_closed, dropped=record.dropped,
        steps=[(r.step, r.round, _STATE[r.status], r.attempt, await text(r)) for r in ordered])
    meta = {r.step.id: StepMeta(r.round, r.executor, r.delivery, r.review_output, r.feedback,
                                r.output_ref, r.usage) for r in ordered}
    return RunState(record, scheduler, meta)


def step_record(scheduler: Scheduler, meta: StepMeta, step: Step) -> StepRecord:
    state = scheduler.state(step.id)
    done = state is StepState.DONE
    return StepRecord(
        step=step, round=meta.round, status=_STATUS[state],  # type: ignore[arg-type]
        attempt=scheduler.attempt(step.id),
        output=scheduler.results.get(step.id) if done and meta.output_ref is None else None,
        output_ref=meta.output_ref if done else None,
        error=scheduler.failures.get(step.id, ""), executor=meta.executor,
        delivery=meta.delivery, review_output=meta.review_output, feedback=meta.feedback,
        usage=meta.usage,
    )


def header(
    base: RunRecord, scheduler: Scheduler, *, plan_closed: bool, synthesis_round: int,
    next_seq: int, usage: Usage, owner: str, lease_until: float, round_reason: str,
) -> RunRecord:
    return RunRecord(
        run_id=base.run_id, request=base.request, status=base.status, owner=owner,
        lease_until=lease_until, round=scheduler.round, plan_closed=plan_closed,
        round_reason=round_reason, synthesis_round=synthesis_round,
        order=[s.id for s in scheduler.steps], dropped=sorted(scheduler.dropped),
        next_seq=next_seq, usage=usage, outcome=base.outcome, started_at=base.started_at,
        updated_at=time.time(),
    )


def accepted_in_round(scheduler: Scheduler, meta: dict[int, StepMeta]) -> list[Step]:
    """The current round's steps so far (a resumed planner continues the plan after them)."""
    return [s for s in scheduler.steps if meta[s.id].round == scheduler.round]


class LostRun(Exception):
    """Another planner took the run over (our compare-and-set failed): stop driving it."""


class RunStore:
    """Writes one run's records: step records as they are, the header with compare-and-set."""

    def __init__(self, kv: Any, run_id: str, revision: int, *, retry_for: float) -> None:
        self.kv = kv
        self.run_id = run_id
        self.revision = revision
        """The header's revision as we last wrote or read it."""
        self.retry_for = retry_for

    async def write(self, head: RunRecord, steps: list[StepRecord]) -> None:
        """Store the step records (concurrently), then the header; ``LostRun`` if another
        planner wrote the header since our last write."""
        async with anyio.create_task_group() as tg:
            for record in steps:
                tg.start_soon(self._retrying, lambda r=record: self.kv.put(
                    step_key(self.run_id, r.step.id), encode(r)))
        try:
            self.revision = await self._retrying(lambda: self.kv.update(
                run_key(self.run_id), encode(head), last=self.revision))
        except KeyWrongLastSequenceError as exc:
            entry = await self.kv.get(run_key(self.run_id))
            stored = decode(entry.value, RunRecord)
            if stored.owner != head.owner or stored.updated_at != head.updated_at:
                raise LostRun(self.run_id) from exc
            self.revision = int(entry.revision)  # our earlier try landed; its ack was lost

    async def _retrying(self, write: Callable[[], Awaitable[Any]]) -> Any:
        """Retry a KV write through a failover (leader elections, reconnects)."""
        delay, deadline = 0.05, time.monotonic() + self.retry_for
        while True:
            try:
                return await write()
            except TRANSIENT as exc:
                if time.monotonic() + delay > deadline:
                    raise
                log.info("run %s: saving state failed (%s); retrying", self.run_id, exc)
                await anyio.sleep(delay)
                delay = min(delay * 2, 2.0)
