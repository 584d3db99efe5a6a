"""Submitting runs and following their events, for the CLI, tests and other programs."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
from nats.errors import NoRespondersError
from nats.js import api

from protocols import (
    TERMINAL_EVENTS,
    ActorError,
    RunAccepted,
    RunEvent,
    RunRejected,
    RunRequest,
    Stream,
    Verb,
    decoder_for,
    stream_name,
)

from .bus import Bus
from .errors import PlancastError


class RunNotAccepted(PlancastError):
    """The planner refused the run, or no planner answered."""


async def submit(bus: Bus, request: RunRequest, *, timeout: float = 10.0) -> RunAccepted:
    """Hand a goal to a planner; returns once a planner has taken the run on.

    While no planner listens (workers still starting), the request is sent again until
    ``timeout``: nobody received it, so that cannot start a run twice.
    """
    subj = bus.subject(Verb.RUN_SUBMIT)
    deadline = anyio.current_time() + timeout
    while True:
        left = deadline - anyio.current_time()
        try:
            reply = await bus.request(subj, request, RunAccepted | RunRejected | ActorError,
                                      timeout=max(left, 0.1))
            break
        except NoRespondersError as exc:
            if left <= 0.2:
                raise RunNotAccepted(
                    f"no planner is listening on {subj}: start one with `plancast worker "
                    "--role planner` (or `plancast up`)") from exc
            await anyio.sleep(0.2)
        except TimeoutError as exc:
            raise RunNotAccepted(f"no planner answered on {subj} within {timeout:g}s") from exc
    if isinstance(reply, RunAccepted):
        return reply
    raise RunNotAccepted(reply.reason)


async def follow(bus: Bus, run_id: str, *, until_end: bool = True) -> AsyncIterator[RunEvent]:
    """A run's events from the first, in sequence order, then live; stops after the last.

    Events are numbered 1, 2, 3 ...; around a failover one may be stored after its
    successor (it was sent again), so early ones wait here until the gap is filled, and
    a repeated number is skipped.
    """
    decoder = decoder_for(RunEvent)
    sub = await bus.js.subscribe(
        bus.subject(Verb.EVENT, run_id), stream=stream_name(bus.prefix, Stream.EVENTS),
        ordered_consumer=True, deliver_policy=api.DeliverPolicy.ALL,
    )
    expected, early = 1, dict[int, RunEvent]()
    try:
        async for msg in sub.messages:
            event = decoder.decode(await bus.resolve(msg.data))
            if event.seq < expected:
                continue
            early[event.seq] = event
            while expected in early:
                event = early.pop(expected)
                expected += 1
                yield event
                if until_end and isinstance(event, TERMINAL_EVENTS):
                    return
    finally:
        await sub.unsubscribe()
