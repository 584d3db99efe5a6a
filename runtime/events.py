"""A run's event log: numbers events 1, 2, 3 ... and stores them on the events stream."""

from __future__ import annotations

import time

import anyio
import msgspec

from protocols import Event, Verb

from .bus import Bus, Unsettled


class EventLog:
    """The single writer of one run's events (the planner that owns the run).

    Each event is stored with ``Nats-Msg-Id = <run>/e<seq>``, so a planner that takes a
    run over and re-publishes the last event does not store it twice.
    """

    def __init__(self, bus: Bus, run_id: str, *, next_seq: int = 1) -> None:
        self.bus = bus
        self.run_id = run_id
        self.subject = bus.subject(Verb.EVENT, run_id)
        self.next_seq = next_seq
        self._lock = anyio.Lock()
        self._unsettled: list[Unsettled] = []

    async def emit(self, event: Event) -> Event:
        """Stamp the event with the next sequence number and the time, and send it.

        Subscribers see it at once; its storage is confirmed by ``flush`` (the planner
        flushes before it saves state, so before it acknowledges what caused the event).
        Emits are serialized, so numbers are stored in order.
        """
        async with self._lock:
            stamped = msgspec.structs.replace(event, seq=self.next_seq, ts=time.time())
            self._unsettled.append(await self.bus.publish_soon(
                self.subject, stamped, msg_id=f"{self.run_id}/e{self.next_seq}"))
            self.next_seq += 1
        return stamped

    async def flush(self) -> None:
        """Wait until every event emitted so far is stored."""
        sent, self._unsettled = self._unsettled, []
        await self.bus.settle(sent)
