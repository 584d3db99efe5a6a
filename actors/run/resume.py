"""Taking a run over: what the previous owner announced but had not saved yet.

A planner saves a run's state after its events are stored, so the events stored after
the last save (the *tail*) describe changes the saved state lacks. The new owner reads
the tail after it has fenced the old owner out (no event can be added behind its back),
and folds it into the restored state: steps planned and dispatched stand as announced,
and the outcomes it announced are not announced again when their messages, which were
never acknowledged, arrive once more.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Hashable
from dataclasses import dataclass, field

import anyio
import msgspec

from protocols import (
    TERMINAL_EVENTS,
    CriticVerdict,
    Event,
    OutcomeRefused,
    PlanApproved,
    PlanFinished,
    PlanRejected,
    ReplanStarted,
    RunEvent,
    RunRecord,
    RunResumed,
    StepDispatched,
    StepFailed,
    StepFinished,
    StepPlanned,
    StepRecord,
    StepStarted,
    Stream,
    Usage,
    UsageRecorded,
    Verb,
    WorkFailed,
    readable_events,
    stream_name,
)
from runtime.bus import EXPECT_SEQ, TRANSIENT, Bus, NotFoundError
from runtime.dag import StepState, StepStateError
from runtime.errors import PlancastError
from runtime.nonces import Nonces

from .effects import INTERRUPTED
from .event_log import identity
from .state import PREVIEW, RunState, StepMeta, source_step, step_source

log = logging.getLogger(__name__)

DECIDED_HERE = frozenset({"timeout", "heartbeat", "unserved", "review_timeout", "unclaimed",
                          "not_claimed", "outcome_unknown"})
"""Failures the owner decided itself (its clocks, its patience): no message brings them
back, so the replay applies them, retry included."""


@dataclass
class Tail:
    """What folding the tail left for the new owner to do."""

    last_seq: int = 0
    """The number of the last event in the log (the new owner continues after it)."""
    announced: set[Hashable] = field(default_factory=set)
    """Events the new owner will re-derive and must not publish again."""
    told: set[Hashable] = field(default_factory=set)
    """The same, kept: outcomes whose late duplicates are acknowledged without a word."""
    republish: dict[int, str] = field(default_factory=dict)
    """Step id → the message id of a task the log shows dispatched: sent again (the
    server drops it if it was stored), since it may have been lost with its planner."""
    terminal: Event | None = None
    """The run already ended: only its state was not saved."""
    usage: Usage | None = None
    """The run's usage as last announced."""
    positions: dict[int, int] = field(default_factory=dict)
    """The first event number of each message read → its stream sequence."""
    skipped: list[int] = field(default_factory=list)
    """Numbers below ``last_seq`` that do not count: the previous owner's writes that were
    lost and, the run being fenced now, never will be stored, and those it stored after a
    lost one (they may rest on it: a claim whose dispatch was lost)."""


async def read_tail(bus: Bus, run_id: str, after: int,
                    positions: dict[int, int] | None = None) -> list[tuple[RunEvent, int]]:
    """The run's stored events after stream sequence ``after``, each with the fence it was
    written under (retried through failovers); ``positions`` gets the first event number
    of each message read → its stream sequence."""
    stream = stream_name(bus.prefix, Stream.EVENTS)
    subject = bus.subject(Verb.EVENT, run_id)
    found: list[tuple[RunEvent, int]] = []
    seq, delay = after + 1, 0.1
    while True:
        try:
            raw = await bus.js.get_msg(stream, seq=seq, subject=subject, next=True)
        except NotFoundError:
            return found
        except TRANSIENT as exc:
            if delay > 5:
                raise
            log.info("run %s: reading its events failed (%s); retrying", run_id, exc)
            await anyio.sleep(delay)
            delay *= 2
            continue
        seq = int(raw.seq or seq) + 1
        fence = int((raw.headers or {}).get(EXPECT_SEQ, 0))
        events = readable_events(await bus.resolve(raw.data or b""), run_id)
        found += [(event, fence) for event in events]
        if positions is not None and events:
            positions[min(e.seq for e in events)] = seq - 1


async def planned_steps(bus: Bus, record: RunRecord, missing: set[int]) -> dict[int, StepRecord]:
    """Records for steps the run's header lists but whose records cannot be read, rebuilt
    from their ``step.planned`` events (as pending: the replay and the scheduler take it
    from there)."""
    log.warning("run %s: no record of steps %s; rebuilding them from the run's events",
                record.run_id, sorted(missing))
    return {e.step.id: StepRecord(step=e.step, round=e.round, status="pending")
            for e, _ in await read_tail(bus, record.run_id, 0)
            if isinstance(e, StepPlanned) and e.step.id in missing}


def fold(state: RunState, tail: list[tuple[RunEvent, int]], *, next_seq: int,
         nonces: Nonces, replayed: Collection[int] = ()) -> Tail:
    """Apply the tail (events numbered ``next_seq`` and on, and before them those of the
    ``replayed`` steps, which have no record) to the restored ``state``."""
    out = Tail(last_seq=next_seq - 1)
    s, meta, now = state.scheduler, state.meta, time.time()
    seen: set[int] = set()
    spent: dict[str, Usage] = {}  # per source, since its step's last dispatch or failure
    expected, lost = next_seq, False  # lost: a number before this one was never stored
    # Numbers an earlier takeover declared lost stay lost, even stored: that owner went on
    # without them, and readers drop them (c46-0145: a replay of steps without a record
    # reached back past a ``run.resumed`` and revived a finish it had declared lost).
    declared = {n for event, _ in tail if isinstance(event, RunResumed) for n in event.skipped}
    replayed_dispatch: set[int] = set()
    # In the order they were numbered, not stored: a pipelined event whose first try went
    # unanswered is stored again after events sent later (``Bus.settle``), so a step's end
    # can stand before its dispatch in the stream (chaos seed 7, run c7-0004).
    for event, fence in sorted(tail, key=lambda item: item[0].seq):
        early = event.seq < next_seq  # only a replayed step's: the rest is in the state
        if early and (_step_of(event) not in replayed or event.seq in declared):
            continue
        if not early:
            # The fence stops an owner's writes only once the run is taken over: a write
            # of its own lost in a failover may be followed by later ones stored (c42-0007:
            # a step's start without its dispatch). Past a lost number, its events do not
            # count, up to the next owner's ``run.resumed``; a reader drops them too.
            lost = not isinstance(event, RunResumed) and (lost or event.seq > expected)
            expected = max(expected, event.seq + 1)
            out.last_seq = max(out.last_seq, event.seq)
            if lost or event.seq in declared:
                continue
            seen.add(event.seq)
        key = identity(event)
        if key is not None:
            out.announced.add(key)
            out.told.add(key)
        match event:
            case StepPlanned() if early and event.step.id not in meta:
                s.adopt(event.step, event.round)  # the plan may be closed by now
                meta[event.step.id] = StepMeta(event.round, dispatched_at=now,
                                               planned_seq=event.seq)
            case StepPlanned() if event.round == s.round and not s.closed \
                    and event.step.id not in meta:
                try:
                    s.add(event.step)
                except PlancastError as exc:  # cannot happen for a step it accepted
                    log.warning("run %s: replaying step %d failed: %s", state.record.run_id,
                                event.step.id, exc)
                    continue
                meta[event.step.id] = StepMeta(event.round, dispatched_at=now,
                                               planned_seq=event.seq)
            case PlanRejected() | PlanApproved(edited=True) if event.round == s.round:
                for sid in s.discard_pending():  # an edit replans the round's held steps
                    meta.pop(sid, None)
            case PlanFinished() if event.round == s.round and not s.closed:
                try:
                    s.close_plan()
                except PlancastError as exc:
                    log.warning("run %s: replaying the plan's end failed: %s",
                                state.record.run_id, exc)
            case StepDispatched() if _known(state, event.step_id):
                m = meta[event.step_id]
                if not _current(state, event.step_id, event.attempt):
                    s.redispatched(event.step_id, event.attempt)
                    if not _current(state, event.step_id, event.attempt):
                        continue  # the state is further along than the log (a newer record)
                    m.new_attempt(now)
                m.task_id = task_id(nonces, state.record.run_id, event.step_id, event.attempt,
                                    fence)
                if not early:  # an earlier one was stored before the state said so
                    out.republish[event.step_id] = m.task_id
                else:
                    replayed_dispatch.add(event.step_id)
                spent.pop(step_source(event.step_id), None)
            case StepStarted() if _current(state, event.step_id, event.attempt):
                m = meta[event.step_id]
                m.claimants.add(f"{event.executor}#{event.delivery}")
                m.executor, m.delivery, m.claimed_at = event.executor, event.delivery, now
                m.beats = event.heartbeat
            case StepFailed() if event.cause in DECIDED_HERE \
                    and _current(state, event.step_id, event.attempt):
                if event.will_retry:
                    s.retry(event.step_id)  # its next dispatch follows in the tail, or now
                else:
                    s.fail(event.step_id, event.error)
                if event.cause in INTERRUPTED:  # (read only for a step of effects "once")
                    meta[event.step_id].check_keys.append(nonces.idempotency(
                        state.record.run_id, event.step_id, event.attempt))
                out.announced.discard(key)  # nothing re-derives it
            case ReplanStarted() if event.round == s.round + 1:
                s.new_round()
                out.told.add(("decision", event.round - 1))
                state.record = msgspec.structs.replace(
                    state.record, plan_closed=False, round_reason=event.reason)
            case _ if isinstance(event, TERMINAL_EVENTS):
                out.terminal = event
            case StepFinished() if len(event.output) <= PREVIEW \
                    and _current(state, event.step_id, event.attempt):
                # The event holds the whole output: apply it now (its dependents go on);
                # the result that comes again is then a quiet duplicate.
                s.complete(event.step_id, event.output)
                m = meta[event.step_id]
                m.executor = event.executor
                m.usage = m.usage + spent.pop(step_source(event.step_id), Usage())
                out.announced -= {key, *_usage_of(out.announced, event.step_id)}
            case OutcomeRefused(kind="step.result") if event.step_id is not None \
                    and "never claimed" in event.reason \
                    and _current(state, event.step_id, event.attempt) \
                    and not meta[event.step_id].claimants:
                # Its message was acknowledged: nothing re-derives it (``timers``).
                meta[event.step_id].unclaimed_at = event.ts
            case UsageRecorded():
                if not early:  # the saved state's total is newer than a replayed step's
                    out.usage = event.total
                spent[event.source] = spent.get(event.source, Usage()) + event.usage
            case StepFinished() | CriticVerdict() | WorkFailed() | OutcomeRefused() \
                    | StepFailed():
                pass  # their messages come again and re-derive them, without a new event
    # A step rebuilt from its events has no task sequence: its claim deadline, which
    # watches that sequence's delivery, would never run out (c47-0075: a task handed over
    # whose claim never came). Sent again under its id, the stream answers with that
    # sequence (or stores it again, if the duplicate window has passed).
    for sid in replayed_dispatch:
        m = meta[sid]
        if _current(state, sid, s.attempt(sid)) and not m.claimants and not m.task_seq:
            out.republish.setdefault(sid, m.task_id)
    state.record = msgspec.structs.replace(state.record, plan_closed=s.closed)
    out.skipped = [n for n in range(next_seq, out.last_seq + 1)
                   if n not in seen and n not in declared]
    return out


def _step_of(event: RunEvent) -> int | None:
    """The step an event is about, if any."""
    if isinstance(event, StepPlanned):
        return event.step.id
    if isinstance(event, UsageRecorded):
        return source_step(event.source)
    step_id: int | None = getattr(event, "step_id", None)
    return step_id


def _usage_of(announced: set[Hashable], step_id: int) -> list[Hashable]:
    """The announced usage of a step (its result will not be re-derived any more)."""
    return [k for k in announced
            if isinstance(k, tuple) and k[:2] == ("usage", step_source(step_id))]


def task_id(nonces: Nonces, run_id: str, step_id: int, attempt: int, fence: int) -> str:
    """A task's ``Nats-Msg-Id``: one per attempt and owner, so a planner that took the run
    over never has its task taken for a duplicate of one its predecessor sent; keyed, so
    nobody else can store a message under it first."""
    return nonces.msg_id(f"{run_id}/{step_id}/{attempt}/f{fence}")


def _known(state: RunState, step_id: int) -> bool:
    try:
        state.scheduler.state(step_id)
    except StepStateError:
        return False  # dropped by a replan, or never planned
    return step_id in state.meta


def _current(state: RunState, step_id: int, attempt: int) -> bool:
    s = state.scheduler
    return _known(state, step_id) and s.state(step_id) is StepState.RUNNING \
        and s.attempt(step_id) == attempt
