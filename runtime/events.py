"""A run's event log: numbers events 1, 2, 3 ... and stores them on the events stream."""

from __future__ import annotations

import time

import anyio
import msgspec

from protocols import Event, Verb

from .bus import Bus


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

    async def emit(self, event: Event) -> Event:
        """Stamp the event with the next sequence number and the time, and store it.

        Emits are serialized: numbers are handed out in the order events are stored, and
        a number is used only once its event is stored (no gaps if a publish fails).
        """
        async with self._lock:
            stamped = msgspec.structs.replace(event, seq=self.next_seq, ts=time.time())
            await self.bus.publish_durable(
                self.subject, stamped, msg_id=f"{self.run_id}/e{self.next_seq}"
            )
            self.next_seq += 1
        return stamped
