"""A run's event log: numbers events 1, 2, 3 ... and stores them on the events stream.

Only the run's owner writes it, and the server enforces that: every event expects the
run's fence subject to end at the owner's ``run.owner`` message, so a planner that lost
the run (paused, partitioned) can no longer add events once another one took it over.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable

import anyio
import msgspec

from protocols import (
    TERMINAL_EVENTS,
    CriticVerdict,
    Event,
    OutcomeRefused,
    StepDispatched,
    StepFailed,
    StepFinished,
    StepReviewing,
    StepStarted,
    UsageRecorded,
    Verb,
    WorkFailed,
    nonce,
)

from .bus import Bus, Fenced, Unsettled, fence_headers

log = logging.getLogger(__name__)


def identity_key(identity: Hashable) -> str:
    """An identity as it is saved with the run's state."""
    return msgspec.json.encode(identity).decode()


def identity_of(key: str) -> Hashable:
    return tuple(msgspec.json.decode(key))


def identity(event: Event) -> Hashable | None:
    """What makes two events "the same news", for the events a planner re-derives when it
    replays outcomes the previous owner had already announced (None: never repeated)."""
    match event:
        case StepDispatched():
            return ("dispatched", event.step_id, event.attempt)
        case StepStarted():
            return ("started", event.step_id, event.attempt, event.executor, event.delivery)
        case StepReviewing():
            return ("reviewing", event.step_id, event.attempt)
        case StepFinished() | StepFailed() | CriticVerdict():
            return (type(event).__name__, event.step_id, event.attempt)
        case UsageRecorded():
            u = event.usage
            return ("usage", event.source, u.calls, u.prompt_tokens, u.completion_tokens)
        case WorkFailed():
            return ("work", event.work, event.step_id, event.attempt, event.actor, event.error)
        case OutcomeRefused():
            return ("refused", event.kind, event.step_id, event.attempt, event.sender)
    return None


class EventLog:
    """The single writer of one run's events (the planner that owns the run).

    Each event is stored with ``Nats-Msg-Id = <run>/<nonce>/e<seq>``, so a retry is stored
    once; the nonce is this writer's secret, so nobody else sharing the stream (roles
    report errors on it) can publish first under the id of an event still to come.
    """

    def __init__(self, bus: Bus, run_id: str, *, next_seq: int = 1, fence: int = 0) -> None:
        self.bus = bus
        self.run_id = run_id
        self.subject = bus.subject(Verb.EVENT, run_id)
        self.next_seq = next_seq
        self.nonce = nonce()
        self.headers = fence_headers(bus.subject(Verb.FENCE, run_id), fence) if fence else None
        self.announced: set[Hashable] = set()
        """Identities of events already in the log that this owner will re-derive (a
        takeover's replay): each is skipped once instead of being told twice."""
        self.closed = False
        """True after the terminal event: nothing may follow it."""
        self.stored_seq = 0
        """Stream sequence of the latest event known stored."""
        self._lock = anyio.Lock(fast_acquire=True)
        self._unsettled: list[Unsettled] = []

    async def emit(self, event: Event) -> Event | None:
        """Stamp the event with the next sequence number and the time, and send it.

        Subscribers see it at once; its storage is confirmed by ``flush`` (the planner
        flushes before it saves state, so before it acknowledges what caused the event).
        Emits are serialized, so numbers are stored in order. Returns None for an event
        that was already announced, or that would follow the terminal one.
        """
        key = identity(event)
        if key is not None and key in self.announced:
            self.announced.discard(key)
            return None
        async with self._lock:
            if self.closed:
                log.warning("run %s: %s after the run ended; not recorded", self.run_id,
                            type(event).__name__)
                return None
            stamped = msgspec.structs.replace(event, seq=self.next_seq, ts=time.time())
            sent = await self.bus.publish_soon(self.subject, stamped, headers=self.headers,
                                               msg_id=f"{self.run_id}/{self.nonce}/e{self.next_seq}")
            self._unsettled.append(sent)  # flush confirms it (at once, if stored below)
            self.next_seq += 1
            if self.headers is not None and not self.bus.pipeline_fenced:
                # The server takes fenced events one at a time: store this one now. If it
                # cannot be, it stays pending: flush tries again, and no state is saved
                # before it is stored (the change it tells of is already made in memory).
                # Only a fence may stop the caller here: it emits, then changes what the
                # event tells of, and must not be cut off in between.
                try:
                    await self.bus.settle([sent])
                except Fenced:
                    raise
                except Exception as exc:
                    log.info("run %s: event %d not stored yet (%s); it is stored with the "
                             "next flush", self.run_id, stamped.seq, exc)
            self.closed = isinstance(event, TERMINAL_EVENTS)
        return stamped

    @property
    def settled(self) -> bool:
        """Every event emitted so far is known stored."""
        return all(u.seq for u in self._unsettled)

    async def flush(self) -> None:
        """Wait until every event emitted so far is stored (``Fenced``: we lost the run)."""
        sent, self._unsettled = self._unsettled, []
        try:
            await self.bus.settle(sent)
        except BaseException:
            self._unsettled[:0] = [u for u in sent if not u.seq]
            raise
        self.stored_seq = max([self.stored_seq, *(u.seq for u in sent)])
