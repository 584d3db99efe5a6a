"""Where an actor's messages come from: core NATS subscriptions and JetStream work queues,
declared as data (``Actor.sources``) with ``@on`` marking the handler of each type."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import anyio
from nats.errors import Error as NatsError
from nats.js import api
from nats.js.errors import NotFoundError

from protocols import Message, Stream, stream_name

from ..config import Settings
from .core import Bus
from .errors import MissingConsumer

log = logging.getLogger(__name__)

H = TypeVar("H", bound=Callable[..., Awaitable[None]])

FETCH_WAIT = 1.0
"""Seconds one pull request waits for work before asking again (bounds drain latency)."""
REBIND_AFTER = 5
"""Consecutive failed fetches after which the consumer is bound afresh."""


def on(*message_types: type[Message]) -> Callable[[H], H]:
    """Mark a method as the handler of these message types: ``async def h(self, msg, delivery)``."""

    def mark(fn: H) -> H:
        fn.__plancast_handles__ = message_types  # type: ignore[attr-defined]
        return fn

    return mark


@dataclass(frozen=True)
class Subscription:
    """Core NATS: requests and broadcasts. ``queue`` shares them among instances."""

    subject: str
    queue: str | None = None
    accepts: tuple[type[Message], ...] = ()
    """Message types valid here; empty means every type the actor handles."""


@dataclass(frozen=True)
class WorkQueue:
    """A JetStream pull consumer shared by all instances of a role: each task goes to one."""

    stream: Stream
    subject: str
    consumer: str
    """Durable consumer name, shared by every instance that does this work."""
    accepts: tuple[type[Message], ...] = ()
    ack_wait: float | None = None
    """Seconds before unacknowledged work is redelivered; None uses the settings."""
    max_deliver: int | None = None
    """Deliveries before the message is dead-lettered; None uses the settings, -1 never
    (for outcomes that must not be lost: a failing handler retries them with backoff)."""
    provisioned: bool = True
    """Made by ``plancast provision`` (a role's shared consumer), not by the actor itself."""


Source = Subscription | WorkQueue


def consumer_config(source: WorkQueue, settings: Settings) -> api.ConsumerConfig:
    """The durable consumer every instance doing this work shares."""
    return api.ConsumerConfig(
        durable_name=source.consumer,
        ack_policy=api.AckPolicy.EXPLICIT,
        ack_wait=source.ack_wait or settings.ack_wait,
        max_deliver=source.max_deliver or settings.max_deliver,
        filter_subject=source.subject,
    )


async def _existing(bus: Bus, source: WorkQueue, who: str) -> None:
    delay = 0.1
    while True:
        try:
            await bus.js.consumer_info(stream_name(bus.prefix, source.stream), source.consumer)
            return
        except NotFoundError:
            raise MissingConsumer(
                f"consumer {source.consumer} does not exist and {who}'s NATS user may not "
                "create it: run `plancast provision --team …` with the admin's credentials"
            ) from None
        except (NatsError, TimeoutError) as exc:
            log.warning("%s: looking up consumer %s failed (%s); retrying in %.1fs",
                        who, source.consumer, exc, delay)
            await anyio.sleep(delay)
            delay = min(delay * 2, 1.0)


async def make_if_missing(bus: Bus, source: WorkQueue, config: api.ConsumerConfig) -> bool:
    """Make the durable consumer unless it exists (one that does is never changed);
    whether it was made here."""
    stream = stream_name(bus.prefix, source.stream)
    try:
        await bus.js.consumer_info(stream, source.consumer)
        return False
    except NotFoundError:
        await bus.js.add_consumer(stream, config=config)
        return True


async def bind(bus: Bus, source: WorkQueue, config: api.ConsumerConfig, who: str) -> None:
    """Make sure the durable consumer is there, retrying through leader elections and
    reconnects (its messages are pulled by ``runtime.bus.pull``, on an inbox of its own).

    A user without provisioning rights (``plancast auth init``) only checks: the consumer
    must exist, made by ``plancast provision``. A consumer the actor makes itself (a run's
    outcomes) is made, or found as it is, in one call; a provisioned one is made only if
    missing, never changed."""
    if source.provisioned and not bus.provisions:
        await _existing(bus, source, who)
        return
    delay = 0.1
    while True:
        try:
            if source.provisioned:
                await make_if_missing(bus, source, config)
            else:
                await bus.js.add_consumer(stream_name(bus.prefix, source.stream),
                                          config=config)
            return
        except (NatsError, TimeoutError) as exc:
            log.warning("%s: binding consumer %s failed (%s); retrying in %.1fs",
                        who, source.consumer, exc, delay)
            await anyio.sleep(delay)
            delay = min(delay * 2, 1.0)
