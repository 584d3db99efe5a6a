"""Submitting runs and watching their events through the faults, as a client would.

``Tracked.events`` is what ``runtime.client.follow`` showed live. A follower that hears
nothing for ``IDLE`` seconds (or fails) starts again from the first event; a replayed
event must equal the one seen live. ``read_log`` reads a run's stored events afresh at
the end, raw, so the report judges what the stream holds (and sees repeated numbers that
``follow`` would skip).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import cast

import anyio
import msgspec
from nats.errors import Error as NatsError
from nats.js import api
from nats.js.errors import NotFoundError

from protocols import (
    TERMINAL_EVENTS,
    RunEvent,
    RunRequest,
    Stream,
    Verb,
    readable_events,
    stream_name,
)
from runtime.bus import Bus
from runtime.client import RunNotAccepted, RunRefused, follow, submit

from .workload import RunSpec

IDLE = 30.0
"""Seconds without an event before a follower starts over (its consumer may be lost)."""
SUBMIT_FOR = 60.0
"""Seconds a client keeps submitting a run (the same id each time) before giving up."""


@dataclass(frozen=True)
class Submission:
    """One ``submit`` call: when it was made and how it ended."""

    start: float
    end: float
    outcome: str
    """``accepted``, ``refused`` (a ``run.rejected``: every chaos goal is valid, so only a
    passing failure can cause one) or ``lost`` (no answer within the deadline)."""
    error: str = ""


@dataclass
class Tracked:
    """One run, as the driver sees it."""

    spec: RunSpec
    submitted: float = 0.0
    accepted: float = 0.0
    submit_errors: list[str] = field(default_factory=list)
    submissions: list[Submission] = field(default_factory=list)
    """Every ``submit`` call made for it (sent again, with the same run id, after one
    failed)."""
    events: list[RunEvent] = field(default_factory=list)
    ended: anyio.Event = field(default_factory=anyio.Event)
    restarts: int = 0
    """Times the follower started over."""
    mismatches: list[str] = field(default_factory=list)
    """Replayed events that differ from the ones seen live."""

    @property
    def run_id(self) -> str:
        return self.spec.run_id

    @property
    def active(self) -> bool:
        """Submitted and not ended (nor given up)."""
        return bool(self.submitted) and not self.ended.is_set()


async def submit_run(bus: Bus, run: Tracked) -> bool:
    """Submit with the run's own id (so a retry cannot start it twice); False if refused
    (the run then counts as ended)."""
    run.submitted = run.submitted or time.time()
    request = RunRequest(goal=run.spec.goal, run_id=run.run_id)
    deadline = time.monotonic() + SUBMIT_FOR
    while time.monotonic() < deadline:
        start = time.time()
        try:
            await submit(bus, request)  # the deadline every user of submit has
        except (RunNotAccepted, NatsError, TimeoutError) as exc:
            error = f"{type(exc).__name__}: {exc}"
            run.submit_errors.append(f"{time.time():.1f} {error}")
            outcome = "refused" if isinstance(exc, RunRefused) else "lost"
            run.submissions.append(Submission(start, time.time(), outcome, error))
            await anyio.sleep(1.0)
            continue
        run.accepted = time.time()
        run.submissions.append(Submission(start, run.accepted, "accepted"))
        return True
    run.ended.set()
    return False


async def follow_run(bus: Bus, run: Tracked) -> None:
    """Collect the run's events until its terminal one (cancel to give up)."""
    while not run.ended.is_set():
        events = cast(AsyncGenerator[RunEvent, None], follow(bus, run.run_id))
        seen = 0
        try:
            while True:
                with anyio.fail_after(IDLE):
                    event = await events.__anext__()
                seen += 1
                if seen <= len(run.events):
                    if _bare(event) != _bare(run.events[seen - 1]):
                        run.mismatches.append(f"seq {event.seq}: replayed {event!r:.200} "
                                              f"but live was {run.events[seen - 1]!r:.200}")
                    continue
                run.events.append(event)
                if isinstance(event, TERMINAL_EVENTS):
                    run.ended.set()
        except StopAsyncIteration:
            pass
        except (TimeoutError, NatsError, OSError) as exc:
            if not isinstance(exc, TimeoutError):
                await anyio.sleep(1.0)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await events.aclose()
        if not run.ended.is_set():
            run.restarts += 1


def _bare(event: RunEvent) -> RunEvent:
    return msgspec.structs.replace(event, ts=0.0)


@dataclass
class StoredLog:
    """A run's events as the stream holds them."""

    events: list[RunEvent]
    """One per sequence number (the first stored), in order."""
    repeats: int = 0
    """Identical events stored twice under one number (informational)."""
    conflicts: list[str] = field(default_factory=list)
    """Different events stored under one number (a violation)."""
    error: str = ""
    """Why the stream could not be read (then ``events`` is empty)."""


async def read_log(bus: Bus, run_id: str, timeout: float = 60.0) -> StoredLog:
    """Every stored event of the run, read raw from the events stream; retried while the
    stream does not answer (a cluster still recovering), ``error`` says if it never did."""
    deadline = anyio.current_time() + timeout
    while True:
        try:
            with anyio.fail_after(max(deadline - anyio.current_time(), 1.0)):
                return await _read_log(bus, run_id)
        except (NatsError, TimeoutError) as exc:
            if anyio.current_time() >= deadline:
                return StoredLog([], error=f"{type(exc).__name__}: {exc}")
            await anyio.sleep(1.0)


async def _read_log(bus: Bus, run_id: str) -> StoredLog:
    stream = stream_name(bus.prefix, Stream.EVENTS)
    subject = bus.subject(Verb.EVENT, run_id)
    try:
        last = await bus.js.get_last_msg(stream, subject)
    except NotFoundError:
        return StoredLog([])
    raw: list[RunEvent] = []
    sub = await bus.js.subscribe(subject, stream=stream, ordered_consumer=True,
                                 deliver_policy=api.DeliverPolicy.ALL)
    try:
        async for msg in sub.messages:
            raw += readable_events(await bus.resolve(msg.data), run_id)
            if msg.metadata.sequence.stream >= (last.seq or 0):
                break
    finally:
        with anyio.CancelScope(shield=True):
            await sub.unsubscribe()
    by_seq: dict[int, list[RunEvent]] = defaultdict(list)
    for event in raw:
        by_seq[event.seq].append(event)
    log = StoredLog([found[0] for _, found in sorted(by_seq.items())])
    for seq, found in sorted(by_seq.items()):
        distinct = {msgspec.json.encode(_bare(e)) for e in found}
        log.repeats += len(found) - len(distinct)
        if len(distinct) > 1:
            kinds = ", ".join(f"{e!r:.160}" for e in found)
            log.conflicts.append(f"seq {seq} stored {len(found)} times with different "
                                 f"events: {kinds}")
    return log
