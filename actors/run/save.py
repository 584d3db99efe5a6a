"""Writing a driven run down: what changed since the last write, and how the run ended.

A run changes in memory (under its ``lock``) and is written behind: ``RunSaver`` keeps
which steps were touched and which sent tasks are not yet confirmed stored, and writes
the steps, then the header, once those tasks are (the state never says more was sent
than the stream holds). A run's end is an event first, then a record that says so.

The written state is a checkpoint; the run's events are the record since. An outcome
whose events tell all it changed (a claim, a short successful result: ``outcomes.apply``)
is acknowledged once they, and the tasks it sent, are stored; a planner taking the run
over replays them (``resume.fold``). Every ``CHECKPOINT_EVERY`` such outcomes, and at
every other change, the state is written, so that replay stays short.
"""

from __future__ import annotations

import logging
import time
from typing import ClassVar

import anyio
import msgspec

from protocols import RunFailed, RunFinished, Step, StepRecord, StepRecords, encode
from runtime.bus import Fenced, Unsettled
from runtime.dag import StepState

from ._api import RunOps
from .event_log import identity_key
from .state import RunFailure, RunStore, StepMeta, header, step_record
from .steps import forget

log = logging.getLogger(__name__)

REPLAYABLE = frozenset({StepState.PENDING, StepState.READY, StepState.RUNNING,
                        StepState.DONE})


class RunSaver:
    """The write-behind of one run's state to the run-state bucket."""

    REPLAY_LIMIT: ClassVar[int] = 8192
    """Events a step may go on without a record: one planned longer ago than this gets
    one, so a takeover never replays more than this many events plus the tail (a step has
    about four: a plan of 2,000 steps writes no step record until it ends)."""
    CHECKPOINT_EVERY: ClassVar[int] = 64
    """Outcomes acknowledged on their events alone before the state is written again: a
    takeover replays at most this many outcomes' events (besides those of the last
    moments of a plan being streamed, ``plan.SAVE_EVERY``)."""

    def __init__(self, run: RunOps, store: RunStore) -> None:
        self.run = run
        self.store = store
        self.touched: set[int] = set(run.meta)
        """Steps whose records need writing."""
        self.unsettled: list[tuple[int, Unsettled]] = []
        """Tasks sent (with their step) whose storage is not confirmed yet."""
        self.replayed = 0
        """Outcomes acknowledged on their events alone since the last write."""
        self.unrecorded: dict[int, int] = {}
        """Steps with no record (their events say all), each with its planned event's
        number, oldest first: the replay of a takeover must start before the oldest."""
        self._removals = run.scheduler.removals
        self.events_seq = run.record.events_seq
        """Where the last written state said a takeover's replay starts."""
        self.ended = run.record.ended
        """``ended`` entries written so far (an ended run's step records, ``_ended``)."""
        self._saved = self._version = 0
        self._lock = anyio.Lock(fast_acquire=True)

    @property
    def never_saved(self) -> bool:
        """No state of this owner's written yet (a fresh run, until its plan's first save)."""
        return self._saved == 0

    async def save_by_events(self, count: int = 1) -> None:
        """``count`` outcomes whose events tell all they changed were applied: store those
        events and the tasks they sent (a takeover replays them), and every
        ``CHECKPOINT_EVERY`` such outcomes the state too."""
        self.replayed += count
        if self.replayed >= self.CHECKPOINT_EVERY:
            await self.save()
            return
        await self.run.events.flush()
        await self.run.env.bus.settle([u for _, u in self.unsettled])  # left for the next save

    async def save(self) -> None:
        """Store what changed: the steps touched since the last save, then the header.

        The header is written with compare-and-set, so a planner that lost the run learns
        it here (``LostRun``). Concurrent callers share one write.
        """
        self._version += 1
        wanted = self._version
        async with self._lock:
            if self._saved >= wanted:
                return  # a write that started after our change already covered it
            await self._settle_sent()
            version, self.replayed = self._version, 0
            touched, self.touched = self.touched, set()
            run = self.run
            records = self._records(touched)
            ended, records = self._ended(records)
            events_seq = self._replay_after()
            head = header(
                run.record, run.scheduler, plan_closed=run.plan_closed,
                synthesis_round=run.synthesis_round, next_seq=run.events.next_seq,
                events_seq=events_seq, usage=run.usage,
                owner=run.env.owner_id, lease_until=time.time() + run.env.lease,
                round_reason=run.round_reason, fence=run.fence,
                announced=sorted(identity_key(k) for k in run.events.announced),
                replayed=sorted(self.unrecorded), ended=self.ended + len(ended))
            try:
                # Never cut in half by a cancel (an abort, a lost lease): a header the server
                # took but whose revision we never learned would make the next save look
                # like another planner's and drop the run (bounded by the store's retries).
                with anyio.CancelScope(shield=True):
                    await self.store.write(head, records, [e for e, _ in ended])
            except BaseException:
                self.touched |= touched  # written again next time
                raise
            for record in [*records, *(r for _, rs in ended for r in rs)]:
                run.meta[record.step.id].recorded = True
            self.ended = head.ended
            self.events_seq = events_seq
            self._saved = version

    def _records(self, touched: set[int]) -> list[StepRecord]:
        """The records to write: of the steps touched, and of those without one that now
        need one; the others stay without (``unrecorded``).

        Whether a step needs a record changes when it is touched, and for all of them when
        steps leave the plan, the run ends or the oldest passes ``REPLAY_LIMIT``: only
        then are the steps without one looked at again, so a save costs what changed."""
        run, records, fresh = self.run, [], []
        rescan = self._rescan()
        for sid in touched | self.unrecorded.keys() if rescan else touched:
            step = self._step_or_none(sid)
            meta = run.meta.get(sid)
            if step is not None and meta is not None and self._replayable(sid, meta):
                if self.unrecorded.get(sid) != meta.planned_seq:
                    fresh.append((meta.planned_seq, sid))
            else:
                self.unrecorded.pop(sid, None)
                if step is not None and meta is not None:
                    records.append(step_record(run.scheduler, meta, step))
        if fresh:  # appended oldest first, sorted again only if one is older than the last
            fresh.sort()
            for _, sid in fresh:
                self.unrecorded.pop(sid, None)
            newest = next(reversed(self.unrecorded.values()), 0)
            self.unrecorded.update((sid, seq) for seq, sid in fresh)
            if fresh[0][0] < newest:
                self.unrecorded = dict(sorted(self.unrecorded.items(), key=lambda i: i[1]))
        return records

    def _ended(self, records: list[StepRecord]
               ) -> tuple[list[tuple[StepRecords, list[StepRecord]]], list[StepRecord]]:
        """In an ended run's state, the records of the steps with none of their own go
        several to an ``ended`` entry (each with its records), one write instead of one per
        step; the rest, as before, each under its own key (one written before must not
        stay behind, stale)."""
        run = self.run
        if run.record.status == "active":
            return [], records
        own = [r for r in records if run.meta[r.step.id].recorded]
        loose = [r for r in records if not run.meta[r.step.id].recorded]
        limit = run.env.bus.settings.max_message_bytes // 2
        entries: list[tuple[StepRecords, list[StepRecord]]] = []
        parts: list[msgspec.Raw] = []
        chunk: list[StepRecord] = []
        size = 0
        for record in loose:
            raw = encode(record)
            if parts and size + len(raw) > limit:
                entries.append((StepRecords(records=parts), chunk))
                parts, chunk, size = [], [], 0
            parts.append(msgspec.Raw(raw))
            chunk.append(record)
            size += len(raw)
        if parts:
            entries.append((StepRecords(records=parts), chunk))
        return entries, own

    def _rescan(self) -> bool:
        """Whether every step without a record must be looked at again (``_records``);
        notes the plan's removals seen, so the next save asks about newer ones only."""
        run, oldest = self.run, next(iter(self.unrecorded.values()), None)
        removals, self._removals = self._removals, run.scheduler.removals
        return run.record.status != "active" or removals != run.scheduler.removals or (
            oldest is not None and run.events.next_seq - oldest > self.REPLAY_LIMIT)

    def _replayable(self, sid: int, meta: StepMeta) -> bool:
        """The step's events say all there is to know of it (planned, dispatched, claimed,
        finished with its whole output; no other attempt, never reviewed), and not from
        too far back, while the run goes on: an ended run's state has every record."""
        run = self.run
        state = run.state_of(sid)
        return run.record.status == "active" and not meta.recorded and 0 < meta.planned_seq \
            and run.events.next_seq - meta.planned_seq <= self.REPLAY_LIMIT \
            and run.scheduler.attempt(sid) == 1 and state in REPLAYABLE \
            and meta.review_output is None and not meta.feedback and not meta.review_sent_at \
            and (state is not StepState.DONE or meta.output_ref is None)

    def _replay_after(self) -> int:
        """The stream sequence a takeover reads the events after: the latest stored, or
        before the oldest step without a record (never later than said last time, when
        where its events are is not known here)."""
        events = self.run.events
        if not self.unrecorded:
            events.stored_at.clear()
            return events.stored_seq
        after = events.replay_after(next(iter(self.unrecorded.values())))
        return min(self.events_seq, events.stored_seq) if after is None else after

    async def _settle_sent(self) -> None:
        """What the state says was sent must be stored before the state is, including
        what was sent while we waited (the state is read after the last wait)."""
        run = self.run
        while True:
            sent, self.unsettled = self.unsettled, []
            try:
                await run.events.flush()
                await run.env.bus.settle([u for _, u in sent])
            except BaseException:
                self.unsettled[:0] = sent
                raise
            for sid, u in sent:
                meta = run.meta.get(sid)
                # (sent under a longer id if another message had taken its own: Bus._ours)
                if meta is not None and u.headers.get("Nats-Msg-Id", "").startswith(
                        meta.task_id):
                    meta.task_seq = u.seq
            if not self.unsettled and run.events.settled:
                break

    def _step_or_none(self, step_id: int) -> Step | None:
        run = self.run
        return run.scheduler.step(step_id) if run.state_of(step_id) is not None else None


async def finish(run: RunOps, answer: str) -> None:
    """The synthesizer's answer ends the run."""
    await run.events.emit(RunFinished(run_id=run.run_id, answer=answer, usage=run.usage))
    run.record = msgspec.structs.replace(run.record, status="finished", outcome=answer)
    await run.save()


async def fail(run: RunOps, failure: RunFailure) -> None:
    """End the run with this failure; the tasks of its running steps are taken back."""
    log.warning("run %s failed at %s: %s", run.run_id, failure.stage, failure)
    async with run.lock:
        await forget(run, [s.id for s in run.scheduler.steps
                           if run.scheduler.state(s.id) is StepState.RUNNING],
                     f"the run failed: {failure}")
        await run.events.emit(RunFailed(run_id=run.run_id, reason=str(failure),
                                        stage=failure.stage, usage=run.usage,
                                        cause=failure.cause))
        run.record = msgspec.structs.replace(run.record, status="failed",
                                             outcome=str(failure))
    try:
        await run.save()
    except Fenced:
        log.warning("run %s was taken over while it failed", run.run_id)


async def record_end(run: RunOps, terminal: object) -> None:
    """Record an end the previous owner announced but did not store."""
    if isinstance(terminal, RunFinished):
        run.record = msgspec.structs.replace(run.record, status="finished",
                                             outcome=terminal.answer)
    elif isinstance(terminal, RunFailed):
        run.record = msgspec.structs.replace(run.record, status="failed",
                                             outcome=terminal.reason)
    run.events.closed = True
    await run.save()
