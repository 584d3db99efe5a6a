"""A run's event log: numbers events 1, 2, 3 ... and stores them on the events stream,
those of one moment together.

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
    EventBatch,
    Message,
    OutcomeRefused,
    StepDispatched,
    StepFailed,
    StepFinished,
    StepReviewing,
    StepStarted,
    UsageRecorded,
    Verb,
    WorkFailed,
    encode,
    nonce,
)
from runtime.bus import Bus, Unsettled, fence_headers

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

    Events are sent behind the emitter's back, one message per moment: those emitted while
    the event loop was busy elsewhere go together, as an ``event.batch`` when there are
    several (``write_behind`` sends them as soon as the loop is free; ``flush`` makes sure
    they are stored). Each message is stored with ``Nats-Msg-Id = <run>/<nonce>/e<seq>``
    (a batch ``e<first>-<last>``), so a retry is stored once; the nonce is this writer's
    secret, so nobody else sharing the stream (roles report errors on it) can publish
    first under the id of an event still to come.
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
        self.stored_at: dict[int, int] = {}
        """The first event number of each message stored → its stream sequence: where a
        replay that must see a given event starts (``replay_after``)."""
        self._pending: list[Event] = []  # emitted, not sent yet
        self._unsettled: list[tuple[int, Unsettled]] = []  # (first number, sent, not stored)
        self._send_lock = anyio.Lock(fast_acquire=True)
        self._wake = anyio.Event()

    async def emit(self, event: Event) -> Event | None:
        """Stamp the event with the next sequence number and the time; it is sent as soon
        as the loop is free (``write_behind``), or by the next ``flush``.

        The planner flushes before it acknowledges what caused the event, and before it
        saves state. Returns None for an event that was already announced, or that would
        follow the terminal one.
        """
        if self.announced:  # only after a takeover
            key = identity(event)
            if key is not None and key in self.announced:
                self.announced.discard(key)
                return None
        if self.closed:
            log.warning("run %s: %s after the run ended; not recorded", self.run_id,
                        type(event).__name__)
            return None
        stamped = msgspec.structs.replace(event, seq=self.next_seq, ts=time.time())
        self._pending.append(stamped)
        self.next_seq += 1
        self.closed = isinstance(event, TERMINAL_EVENTS)
        self._wake.set()
        return stamped

    async def write_behind(self) -> None:
        """Send emitted events whenever the loop is free, until cancelled (the run's owner
        runs this beside the run): subscribers see events without waiting for a save."""
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            try:
                await self._send()
            except Exception as exc:  # flush sends them again, and says why if it fails
                log.info("run %s: events not sent yet (%s); the next flush sends them",
                         self.run_id, exc)

    @property
    def settled(self) -> bool:
        """Every event emitted so far is known stored."""
        return not self._pending and all(u.seq for _, u in self._unsettled)

    async def flush(self) -> None:
        """Wait until every event emitted so far is stored (``Fenced``: we lost the run).

        It first lets the loop run once, so that the events other tasks emit in this same
        moment (each result of a batch is handled by its own task) go in the same message.
        """
        await anyio.lowlevel.checkpoint()
        await self._send()
        sent = list(self._unsettled)
        await self.bus.settle([u for _, u in sent])  # another flush may settle the same ones
        self._unsettled = [(first, u) for first, u in self._unsettled if not u.seq]
        for first, u in sent:
            self.stored_at[first] = u.seq
        self.stored_seq = max([self.stored_seq, *(u.seq for _, u in sent)])

    def replay_after(self, number: int) -> int | None:
        """The stream sequence after which the events numbered ``number`` and on are all
        stored (None: not known here); messages before that one are forgotten."""
        firsts = [first for first in self.stored_at if first <= number]
        if not firsts:
            return None
        start = max(firsts)
        for first in firsts:
            if first != start:
                del self.stored_at[first]
        return self.stored_at[start] - 1

    async def _send(self) -> None:
        """Send every pending event, in order, as few messages as fit."""
        async with self._send_lock:
            while self._pending:
                count, message, msg_id = self._next_message()
                sent = await self.bus.publish_soon(self.subject, message, headers=self.headers,
                                                   msg_id=msg_id)
                first = self._pending[0].seq
                del self._pending[:count]
                self._unsettled.append((first, sent))
                if self.headers is not None and not self.bus.pipeline_fenced:
                    # The server takes fenced writes one at a time (a replicated stream):
                    # store this one before the next is sent.
                    await self.bus.settle([sent])
                    self.stored_at[first] = sent.seq

    def _next_message(self) -> tuple[int, Message, str]:
        """How many pending events the next message takes, the message and its id."""
        first = self._pending[0]
        base = f"{self.run_id}/{self.nonce}/e{first.seq}"
        most = self.bus.settings.event_batch
        if len(self._pending) == 1 or most == 1:
            return 1, first, base
        # A batch stays under half the largest message, so it is never offloaded.
        limit, size, parts = self.bus.settings.max_message_bytes // 2, 0, list[msgspec.Raw]()
        for event in self._pending[:most]:
            raw = encode(event)
            if parts and size + len(raw) > limit:
                break
            parts.append(msgspec.Raw(raw))
            size += len(raw)
        if len(parts) == 1:  # a large event goes alone (it may be offloaded)
            return 1, first, base
        last = first.seq + len(parts) - 1
        return len(parts), EventBatch(run_id=self.run_id, events=parts), f"{base}-{last}"
