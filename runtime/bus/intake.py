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
        started = False
        while True:  # (re)bind the consumer: a failover may lose it or time its creation out
            psub = await bind(self.bus, source, config, self.name)
            if not started:
                task_status.started(scope)
                started = True
            try:
                await self._fetch_loop(source, decoder, config.max_deliver or 1)
            finally:
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                    await psub.unsubscribe()

    async def _fetch_loop(self, source: WorkQueue, decoder: Any, max_deliver: int) -> None:
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
                except ConsumerGone as exc:
                    log.warning("%s: consumer %s is gone (%s); binding it again", self.name,
                                source.consumer, exc)
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
