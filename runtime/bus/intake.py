"""Intake: an actor's sources read into deliveries, each handed on once a slot is free.

A core subscription hands on what it is sent. A work queue is read through its JetStream
pull consumer, asking for no more tasks than the actor has free slots (its other sources
need slots too), and the consumer is bound again when a failover loses it. Handling a
delivery, and the slots themselves, stay with the actor (``runtime.actor``).
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import TaskStatus
from nats.errors import Error as NatsError
from nats.js.api import ConsumerConfig

from protocols import stream_name

from .core import Bus
from .delivery import Delivery
from .errors import ConsumerGone
from .pull import Pull
from .sources import FETCH_WAIT, REBIND_AFTER, Subscription, WorkQueue, bind

log = logging.getLogger(__name__)

ELECTION_GRACE = 15.0
"""Seconds a consumer may be missing before it is a warning: a new or failed-over
consumer answers 503 (no responders) until its replicas elect a leader, which nats-server
does within a few seconds (4-9 s after a crash)."""
PULL_CAP = 256
"""Most tasks one pull request of one source asks for. With 64, a 1,000-wide layer waited a
round trip per 64 tasks (the next request goes out once every task of the last has its
handler started): its last steps started 30 to 50 ms after they were sent. With no cap (up to
1,024 free slots), a burst of quick steps started a handler task per step where fewer,
reused ones did (25 % more executor CPU)."""


@dataclass(frozen=True)
class Intake:
    """Reads the sources of one actor; what it needs of the actor is named here."""

    bus: Bus
    name: str
    """The actor's role, in log lines and consumer bindings."""
    admit: Callable[[Delivery, Any], Awaitable[None]]
    """Wait for a free slot, then handle the delivery (with this decoder) in its own task."""
    admit_now: Callable[[Delivery, Any], bool]
    """The same if a slot is free now (True), without waiting (False)."""
    room: Callable[[], Awaitable[None]]
    """Return once a slot is free, without taking it."""
    free: Callable[[], int]
    """How many slots are free now."""
    cap: int
    """Most tasks one pull request asks for."""

    async def subscription(
        self, source: Subscription, decoder: Any, scope: anyio.CancelScope,
        task_status: TaskStatus[Any],
    ) -> None:
        sub = await self.bus.nc.subscribe(source.subject, queue=source.queue or "")
        task_status.started(scope)
        try:
            async for msg in sub.messages:
                await self.admit(Delivery(msg, durable=False), decoder)
        finally:
            with anyio.CancelScope(shield=True):
                await sub.unsubscribe()

    async def work_queue(
        self, source: WorkQueue, config: ConsumerConfig, decoder: Any,
        scope: anyio.CancelScope, task_status: TaskStatus[Any],
    ) -> None:
        started, absence = False, _Absence(self.name, source.consumer)
        while True:  # (re)bind the consumer: a failover may lose it or time its creation out
            await bind(self.bus, source, config, self.name)
            if not started:
                task_status.started(scope)
                started = True
            await self._fetch_loop(source, decoder, config.max_deliver or 1, absence)

    async def _fetch_loop(self, source: WorkQueue, decoder: Any, max_deliver: int,
                          absence: _Absence) -> None:
        """Keep a pull open for as many tasks as there are free slots, handing each to a
        handler as it comes; return to rebind the consumer after errors that do not pass
        (a consumer lost in a failover)."""
        pull = Pull(self.bus, stream_name(self.bus.prefix, source.stream), source.consumer,
                    cap=self.cap, expires=FETCH_WAIT)
        await pull.start()
        msgs: deque[Any] = deque()
        # A message read while a slot is free goes to a handler at once, from the read
        # loop: not through this loop's next turn (one loop turn less per step). Only when
        # none waits here, so they are handled in the order they came.
        pull.take = lambda msg: not msgs and self.admit_now(
            Delivery(msg, durable=True, max_deliver=max_deliver), decoder)
        failures = 0
        try:
            while failures < REBIND_AFTER:
                # Ask only while a slot is free (other sources of this actor need slots
                # too), for no more than are free.
                await self.room()
                try:
                    msgs.extend(await pull.next_batch(self.free))
                    failures = 0
                    if pull.answered:
                        absence.ended()
                except ConsumerGone as exc:
                    absence.gone(exc)
                    return
                except NatsError as exc:  # e.g. reconnecting: keep the actor, try again
                    failures += 1
                    log.warning("%s: fetching work failed (%s); retrying", self.name, exc)
                    await anyio.sleep(FETCH_WAIT)
                while msgs:
                    delivery = Delivery(msgs[0], durable=True, max_deliver=max_deliver)
                    await self.admit(delivery, decoder)
                    msgs.popleft()
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                # Pulled but never handed to a handler (we were stopped): give them back
                # now rather than after their ack wait.
                for msg in [*msgs, *pull.drop()]:
                    await Delivery(msg, durable=True).nak()
                await pull.stop()


class _Absence:
    """How long one consumer has been gone: a debug line while its replicas may be electing
    a leader, one warning when it lasts longer (and a line when it is back)."""

    def __init__(self, who: str, consumer: str) -> None:
        self.who, self.consumer = who, consumer
        self.since: float | None = None
        self.warned = False

    def gone(self, why: Exception) -> None:
        now = anyio.current_time()
        self.since = now if self.since is None else self.since
        level = logging.DEBUG
        if now - self.since >= ELECTION_GRACE and not self.warned:
            level, self.warned = logging.WARNING, True
        log.log(level, "%s: consumer %s is gone (%s; %.1fs so far); binding it again",
                self.who, self.consumer, why, now - self.since)

    def ended(self) -> None:
        """The consumer answered: a later loss is a new absence."""
        if self.since is not None:
            log.log(logging.INFO if self.warned else logging.DEBUG,
                    "%s: consumer %s is back", self.who, self.consumer)
        self.since, self.warned = None, False
