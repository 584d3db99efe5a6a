"""A run's state to and from the run-state bucket (see ``protocols.state``).

The planner writes the header and the records of the steps that changed before it
acknowledges any outcome, so a planner that takes the run over resumes exactly where
the last one stopped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import msgspec

from protocols import (
    ObjectRef,
    RunRecord,
    Step,
    StepRecord,
    StepRecords,
    Usage,
    decode,
    encode,
    ended_key,
    run_key,
    runs_bucket,
    step_key,
)
from runtime.bus import (
    EXPECT_SEQ,
    EXPECT_STREAM,
    FENCE_BUSY,
    RETRY_CAP,
    TRANSIENT,
    UNCONFIRMED,
    WRONG_LAST_SEQUENCE,
    APIError,
    Bus,
    Fenced,
    acknowledged,
    fence_headers,
    outcome,
)
from runtime.dag import Scheduler, StepState, references
from runtime.errors import PlancastError

log = logging.getLogger(__name__)

INLINE = 2048
"""Outputs longer than this are kept in the object store; the record holds a reference."""
PREVIEW = 4000
"""Characters of a step's output carried in its ``step.finished`` event (a longer one is
cut and ends with "…"): an event with at most this many holds the whole output."""

_STATUS = {StepState.PENDING: "pending", StepState.READY: "ready",
           StepState.RUNNING: "running", StepState.DONE: "done", StepState.FAILED: "failed"}
_STATE = {v: k for k, v in _STATUS.items()}


@dataclass
class StepMeta:
    """What the planner knows about a step beyond the DAG state."""

    round: int
    executor: str = ""
    """The latest claimant of the current attempt; once it is done, who sent the outcome."""
    delivery: int = 0
    review_output: str | None = None
    feedback: str = ""
    output_ref: ObjectRef | None = None
    """Where a long output is kept (the record holds only this reference)."""
    usage: Usage = field(default_factory=Usage)
    claimants: set[str] = field(default_factory=set)
    """``executor#delivery`` of every claim of the current attempt."""
    dispatched_at: float = 0.0
    """Unix time the current attempt was dispatched (or the run adopted)."""
    claimed_at: float = 0.0
    """Unix time of the current attempt's latest claim (0: not claimed yet)."""
    beats: float = 0.0
    """The latest claimant's heartbeat interval (0: it sends none)."""
    review_sent_at: float = 0.0
    """Unix time its output went to the critic."""
    task_seq: int = 0
    """The current attempt's task in the work stream, once stored."""
    delivered_at: float = 0.0
    """Unix time its task was first seen delivered (0: not yet; the claim deadline)."""
    unclaimed_at: float = 0.0
    """Unix time a result came for the attempt from a process that had not claimed it while
    nobody had (0: none): refused, and the attempt fails ``not_claimed`` unless a claim
    follows within ``[timeouts] claim`` (the result's task was acknowledged: nothing else
    may come)."""
    answer: int = 0
    """A fingerprint of the result that settled the attempt (0: none known here): the
    same message again passes, another answer is refused."""
    task_id: str = ""
    """The ``Nats-Msg-Id`` of that task."""
    recorded: bool = False
    """A step record of it was written (from then on every change is written too)."""
    planned_seq: int = 0
    """The number of its ``step.planned`` event: where a replay that rebuilds it from the
    run's events must start."""
    check_keys: list[str] = field(default_factory=list)
    """Idempotency keys of its interrupted attempts whose outcome is unknown (``effects``):
    kept across attempts, until one's outcome is known."""

    def new_attempt(self, now: float) -> None:
        """Forget the previous attempt's claims and timers."""
        self.executor, self.delivery, self.claimants = "", 0, set()
        self.dispatched_at, self.claimed_at, self.review_sent_at = now, 0.0, 0.0
        self.beats = 0.0
        self.task_seq, self.task_id, self.review_output = 0, "", None
        self.delivered_at, self.answer, self.unclaimed_at = 0.0, 0, 0.0


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
    now = time.time()
    meta = {r.step.id: StepMeta(
        r.round, r.executor, r.delivery, r.review_output, r.feedback, r.output_ref, r.usage,
        # A planner taking the run over starts the clocks afresh: never early.
        claimants=set(r.claimants), dispatched_at=now, claimed_at=now if r.claimed_at else 0.0,
        beats=r.heartbeat,
        review_sent_at=now if r.review_output is not None else 0.0,
        task_seq=r.task_seq, task_id=r.task_id, recorded=True,
        check_keys=list(r.check_keys)) for r in ordered}
    return RunState(record, scheduler, meta)


def step_source(step_id: int) -> str:
    """What a step's spending is told as coming from (``usage.recorded``'s ``source``)."""
    return f"step:{step_id}"


def source_step(source: str) -> int | None:
    """The step a ``usage.recorded`` source names, if it names one."""
    kind, _, number = source.partition(":")
    return int(number) if kind == "step" and number.isdigit() else None


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
        usage=meta.usage, claimants=sorted(meta.claimants), dispatched_at=meta.dispatched_at,
        claimed_at=meta.claimed_at, heartbeat=meta.beats, task_seq=meta.task_seq,
        task_id=meta.task_id, check_keys=list(meta.check_keys),
    )


def header(
    base: RunRecord, scheduler: Scheduler, *, plan_closed: bool, synthesis_round: int,
    next_seq: int, events_seq: int, usage: Usage, owner: str, lease_until: float,
    round_reason: str, fence: int, announced: list[str], replayed: list[int], ended: int = 0,
) -> RunRecord:
    return RunRecord(
        run_id=base.run_id, request=base.request, status=base.status, owner=owner,
        lease_until=lease_until, round=scheduler.round, plan_closed=plan_closed,
        round_reason=round_reason, synthesis_round=synthesis_round,
        order=[s.id for s in scheduler.steps], dropped=sorted(scheduler.dropped),
        next_seq=next_seq, events_seq=events_seq, usage=usage, outcome=base.outcome,
        started_at=base.started_at, updated_at=time.time(), deadline=base.deadline,
        announced=announced, fence=fence, replayed=replayed, ended=ended,
        steps_done=len(scheduler.results),
    )


def shaped(step: Step) -> Step:
    """The step as its ``step.planned`` event shows it (``$N`` references counted among its
    dependencies): a step rebuilt from that event equals the model's line it came from."""
    depends_on = sorted(set(step.depends_on).union(references(step.args)))
    return step if depends_on == step.depends_on else msgspec.structs.replace(
        step, depends_on=depends_on)


def accepted_in_round(scheduler: Scheduler, meta: dict[int, StepMeta]) -> list[Step]:
    """The current round's steps so far (a resumed planner continues the plan after them)."""
    return [s for s in scheduler.steps if meta[s.id].round == scheduler.round]


class LostRun(Fenced):
    """Another planner took the run over (our compare-and-set failed): stop driving it.

    Catch ``Fenced``: a refused fenced event says the same, from the events stream."""


Stage = Literal["plan", "execute", "synthesize", "runtime"]


class RunFailure(PlancastError):
    """The run cannot finish; carries what the ``run.failed`` event says."""

    def __init__(self, stage: Stage, reason: str, cause: str = "") -> None:
        super().__init__(reason)
        self.stage = stage
        self.cause = cause


class RunStore:
    """Writes one run's records: the header with compare-and-set, each step record fenced
    on the header's revision, so only the planner holding the run can write either."""

    def __init__(self, bus: Bus, kv: Any, run_id: str, revision: int, *,
                 retry_for: float) -> None:
        self.bus = bus
        self.kv = kv
        self.run_id = run_id
        self.revision = revision
        """The header's revision as we last wrote or read it."""
        self.retry_for = retry_for
        bucket = runs_bucket(bus.prefix)
        self._stream = f"KV_{bucket}"
        self._prefix = f"$KV.{bucket}."
        self._header_subject = self._prefix + run_key(run_id)

    async def write(self, head: RunRecord, steps: list[StepRecord],
                    ended: Sequence[StepRecords] = ()) -> None:
        """Store the step records (and an ended run's ``ended`` entries, numbered from
        ``head.ended - len(ended)``), then the header; ``LostRun`` if another planner
        wrote the header since our last write."""
        first = head.ended - len(ended)
        entries = [(step_key(self.run_id, r.step.id), encode(r)) for r in steps]
        entries += [(ended_key(self.run_id, first + i), encode(e)) for i, e in enumerate(ended)]
        await self._write_entries(entries, fence_headers(self._header_subject, self.revision))
        try:  # compare-and-set on the header's revision; busy (another write in flight) waits
            ack = await self._retrying(lambda: self.bus.js.publish(
                self._header_subject, encode(head), stream=self._stream,
                headers={EXPECT_SEQ: str(self.revision)}), busy=True)
            self.revision = int(ack.seq)
        except APIError as exc:
            if getattr(exc, "err_code", None) != WRONG_LAST_SEQUENCE:
                raise
            # Read from the stream's leader (a replica may lag): did our earlier try land?
            raw = await self._retrying(lambda: self.bus.js.get_last_msg(
                self._stream, self._header_subject))
            stored = decode(raw.data or b"", RunRecord)
            if stored.owner != head.owner or stored.updated_at != head.updated_at:
                raise LostRun(self.run_id) from exc
            self.revision = int(raw.seq or 0)  # it did; only its acknowledgement was lost

    async def _write_entries(self, entries: list[tuple[str, bytes]],
                             fence: dict[str, str]) -> None:
        """All sent at once where the server allows it (their acknowledgements awaited
        together), else one after another; an entry whose pipelined write failed for any
        reason but a lost fence is written again the careful way."""
        if not self.bus.pipeline_fenced:
            for key, data in entries:
                await self._put(key, data, fence)
            return
        headers = {**fence, EXPECT_STREAM: self._stream}
        sent = []
        for key, data in entries:
            try:
                future = await self.bus.js.publish_async(self._prefix + key, data,
                                                         headers=headers)
            except TRANSIENT:
                future = None
            sent.append((key, data, future))
        await acknowledged([future for _, _, future in sent])
        again = []
        for key, data, future in sent:
            try:
                outcome(future)
            except UNCONFIRMED as exc:
                if getattr(exc, "err_code", None) == WRONG_LAST_SEQUENCE:
                    raise LostRun(self.run_id) from exc
                if _busy(exc):
                    self.bus.fence_busy()
                again.append((key, data))
        for key, data in again:
            await self._put(key, data, fence)

    async def _put(self, key: str, data: bytes, fence: dict[str, str]) -> None:
        subject = self._prefix + key
        try:
            await self._retrying(lambda: self.bus.js.publish(
                subject, data, stream=self._stream, headers=fence))
        except APIError as exc:
            if getattr(exc, "err_code", None) == WRONG_LAST_SEQUENCE:
                raise LostRun(self.run_id) from exc
            raise

    async def _retrying(self, write: Callable[[], Awaitable[Any]], *, busy: bool = False) -> Any:
        """Retry a KV call through a failover (leader elections, reconnects) and, with
        ``busy`` or once the server takes fenced writes one at a time, while it is busy."""
        delay, deadline = 0.05, time.monotonic() + self.retry_for
        while True:
            try:
                return await write()
            except UNCONFIRMED as exc:
                wait = busy or not self.bus.pipeline_fenced
                if not isinstance(exc, TRANSIENT) and not (_busy(exc) and wait):
                    raise
                if time.monotonic() + delay > deadline:
                    raise
                log.info("run %s: saving state failed (%s); retrying", self.run_id, exc)
                await anyio.sleep(delay)
                delay = min(delay * 2, RETRY_CAP)


def _busy(exc: BaseException) -> bool:
    return isinstance(exc, APIError) and getattr(exc, "err_code", None) == FENCE_BUSY
