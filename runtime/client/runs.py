"""Submitting runs and following their events, for the CLI, tests and other programs.

Both ride out what a NATS deployment does in normal life: a reply lost in a reconnect, a
leader election, a server restart, a cluster node that dies with the consumer we read
through. ``submit`` picks the run id itself, so sending a request again cannot start the
run twice. ``follow`` reads the run's events through a consumer of its own and, when that
consumer goes quiet or away, makes a new one from the stream sequence after the last event
it read, so every event is yielded once and in order.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import anyio
import msgspec

from protocols import (
    TERMINAL_EVENTS,
    ActorError,
    ReplanRequest,
    RunAccepted,
    RunCancel,
    RunEvent,
    RunRejected,
    RunRequest,
    RunResumed,
    Stream,
    Verb,
    cancel_id,
    new_run_id,
    nonce,
    readable_events,
    stored_events,
    stream_name,
)

from ..bus import (
    HEARTBEAT,
    TRANSIENT,
    Bus,
    ConnectionClosedError,
    NoRespondersError,
    NotFoundError,
    PublishRefused,
    StreamReader,
    describe,
    stream_missing,
)
from ..errors import PlancastError
from .errors import RunNotAccepted, RunRefused, RunStalled

log = logging.getLogger(__name__)

SUBMIT_ATTEMPT = 2.0
"""Seconds the first submit attempt waits for a reply; each retry waits twice as long."""
RETRYABLE_PAUSE = 0.5
"""Seconds before a submission the planner could not store now is sent again."""
SUBMIT_TIMEOUT = 30.0
"""Seconds ``submit`` waits for an answer by default: a failover can hold one that long (a
leader election, then a planner's lease running out before another adopts the run); an
answer normally comes in milliseconds."""
NOBODY_LISTENING = 10.0
"""Seconds after which a submission no planner has ever heard gives up: none is running."""


async def submit(bus: Bus, request: RunRequest, *,
                 timeout: float = SUBMIT_TIMEOUT) -> RunAccepted:
    """Hand a goal to a planner; returns the planner's acceptance.

    The request carries a run id (chosen here unless the caller set one), and a planner
    answers "accepted" for a run id it already knows. So a request whose reply did not
    come (a lost reply, a planner that died or is cut off, a reconnect) is sent again, with
    a longer wait each time, until ``timeout``: on ``run.resubmit``, which every planner
    hears, so it cannot be lost again to the one planner the queue group chose. While no
    planner listens (workers still starting), it is sent again too: nobody received it. A
    planner that could not store the run now (a leader election), or that the queue group
    chose while it drives ``max_active_runs`` runs, says so ("retryable"): sent again too.
    Only a refusal of the request itself is final (``RunRefused``).
    """
    if request.run_id is None:
        request = msgspec.structs.replace(request, run_id=new_run_id())
    first, again = bus.subject(Verb.RUN_SUBMIT), bus.subject(Verb.RUN_RESUBMIT)
    subj = first
    start = anyio.current_time()
    deadline = start + timeout
    wait, sent, listening, unstored = SUBMIT_ATTEMPT, 0, False, ""
    while True:
        left = deadline - anyio.current_time()
        if left <= 0 or (not listening and anyio.current_time() - start > NOBODY_LISTENING):
            raise RunNotAccepted(_unanswered(first, request.run_id, timeout, sent,
                                             listening, unstored))
        try:
            sent += 1
            reply = await bus.request(subj, request, RunAccepted | RunRejected | ActorError,
                                      timeout=min(left, wait))
        except PublishRefused as exc:  # no planner will ever hear it: say so now
            if subj == again:  # users written by an older release: run.submit only
                subj = first
                continue
            raise RunNotAccepted(f"{exc}: submit as a user that may (`client` of `plancast "
                                 "auth init`, with --creds / NATS_CREDS)") from None
        except NoRespondersError:
            # Nobody on run.resubmit: planners of an older release listen on run.submit only.
            subj = first
            await anyio.sleep(min(0.2, left))
            continue
        except TRANSIENT as exc:  # no reply in time, or the connection is reconnecting
            listening, subj = True, again
            log.info("no answer to run %s yet (%s); sending it again", request.run_id,
                     type(exc).__name__)
            wait *= 2
            if not isinstance(exc, TimeoutError):
                await anyio.sleep(min(0.2, left))
            continue
        if isinstance(reply, RunAccepted):
            return reply
        if isinstance(reply, RunRejected) and reply.retryable:
            listening, subj, unstored = True, again, reply.reason
            log.info("run %s not stored yet (%s); sending it again", request.run_id,
                     reply.reason)
            await anyio.sleep(min(RETRYABLE_PAUSE, left))
            continue
        raise RunRefused(reply.reason)


def _unanswered(subj: str, run_id: str | None, timeout: float, sent: int, listening: bool,
                unstored: str) -> str:
    """Why ``submit`` gave up, and what to do."""
    if unstored:
        return (f"no planner could store run {run_id} within {timeout:g}s ({sent} attempts; "
                f"last: {unstored}); the cluster may be recovering: submit again with the "
                "same run id, or check the servers")
    if not listening:
        return (f"no planner is listening on {subj}: start one with `plancast worker "
                "--role planner` (or `plancast up`)")
    return (f"no planner answered on {subj} within {timeout:g}s ({sent} attempts); run "
            f"{run_id} may still start: check with `plancast status`")


async def cancel(bus: Bus, run_id: str, reason: str = "", *, source: str = "") -> None:
    """Ask the run's planner to stop it; it ends with ``run.failed`` (cause ``cancelled``).

    Sent as the ``client`` user's outcome, stored before this returns; the id makes a
    repeat harmless. A run that has ended already is not changed (its planner says so)."""
    await bus.publish_durable(bus.subject(Verb.RESULT, run_id, "client"),
                              RunCancel(run_id=run_id, reason=reason, source=source),
                              msg_id=cancel_id(run_id))


async def request_replan(bus: Bus, run_id: str, reason: str, *, source: str) -> None:
    """Ask the run's planner for a new plan round now (``run.replan`` as the ``client``):
    the steps still running are dropped, the planner's model plans again told ``reason``,
    and ``event.replan`` names ``source``. A run with no replans left fails instead."""
    await bus.publish_durable(bus.subject(Verb.RESULT, run_id, "client"),
                              ReplanRequest(run_id=run_id, reason=reason, source=source),
                              msg_id=f"{run_id}/replan/{nonce()}")


async def follow(
    bus: Bus, run_id: str, *, until_end: bool = True, idle_timeout: float | None = None,
) -> AsyncIterator[RunEvent]:
    """A run's events from the first, in sequence order, then live; stops after the last.

    Events are numbered 1, 2, 3 ...; around a failover one may be stored after its
    successor, or twice (it was sent again), so early ones wait here until the gap is
    filled, and a repeated number is skipped. Numbers a ``run.resumed`` lists as
    ``skipped`` are passed over, even those stored (after a lost one, which they may rest
    on). An event of a type this client does not know (from a newer deployment) takes its
    number but is not yielded.

    Timeouts, reconnects and the loss of the consumer are ridden out: reading resumes from
    the stream sequence after the last message read. ``idle_timeout``: raise
    ``RunStalled`` when no event arrives for that many seconds (None: wait as long as the
    run lasts).
    """
    stream = stream_name(bus.prefix, Stream.EVENTS)
    reader = StreamReader(bus, bus.subject(Verb.EVENT, run_id), stream)
    resume, expected, early = 1, 1, dict[int, RunEvent | None]()
    last_event = anyio.current_time()
    delay, missing_since = 0.1, None
    try:
        while True:
            now = anyio.current_time()
            if idle_timeout is not None and now - last_event > idle_timeout:
                raise RunStalled(
                    f"run {run_id} published no event for {idle_timeout:g}s (next expected: "
                    f"event {expected}); check that its planner runs with `plancast status`")
            wait = HEARTBEAT
            if idle_timeout is not None:
                wait = min(wait, last_event + idle_timeout - now)
            try:
                if reader.sub is None:
                    await reader.open(resume)
                    missing_since, delay = None, 0.1
                msg = await reader.next(wait)
                if msg is None:
                    continue
                try:
                    data = await bus.resolve(msg.data)
                except ValueError as exc:  # a reference refused, or not matching its digest
                    log.warning("run %s: skipping an event that cannot be fetched (%s)",
                                run_id, exc)
                    data = b""  # skipped below, like any event that does not decode
            except ConnectionClosedError:
                raise
            except Exception as exc:
                if bus.nc.is_closed:
                    raise
                missing_since = _check_stream(exc, stream, bus, missing_since)
                log.info("following run %s: %s; reading again from stream sequence %d",
                         run_id, describe(exc), resume)
                await reader.close(delete=False)
                await anyio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            resume, last_event = msg.metadata.sequence.stream + 1, anyio.current_time()
            for seq, event in stored_events(data, run_id):
                if seq < expected:
                    continue
                early[seq] = event
                if isinstance(event, RunResumed):  # numbers lost with the previous owner,
                    # and those it stored after a lost one (they may rest on it): dropped
                    early |= {n: None for n in event.skipped if n >= expected}
            while expected in early:
                ready = early.pop(expected)
                expected += 1
                if ready is None:
                    continue
                yield ready
                if until_end and isinstance(ready, TERMINAL_EVENTS):
                    return
    finally:
        await reader.close(delete=True)


def _check_stream(exc: Exception, stream: str, bus: Bus, since: float | None) -> float | None:
    """Tolerate a missing events stream for a while (a server still loading it); then say
    what is wrong. Returns when it was first found missing, or None."""
    if not stream_missing(exc):
        return None
    now = anyio.current_time()
    since = now if since is None else since
    if now - since > bus.settings.publish_retry_for:
        raise PlancastError(
            f"there is no stream {stream} on {bus.server_url}: start a worker for this "
            "deployment or check --prefix / PLANCAST_PREFIX") from exc
    return since


async def last_event(bus: Bus, run_id: str) -> RunEvent | None:
    """The run's latest stored event, None if it has none: the log says a run has ended a
    moment before its stored state does."""
    stream = stream_name(bus.prefix, Stream.EVENTS)
    try:
        raw = await bus.js.get_last_msg(stream, bus.subject(Verb.EVENT, run_id))
    except NotFoundError:
        return None
    events = readable_events(await bus.resolve(raw.data or b""), run_id)
    # none: a newer kind of event; the run has not ended as far as we know
    return events[-1] if events else None


async def events_so_far(bus: Bus, run_id: str) -> list[RunEvent]:
    """The run's events stored until now, from the first (it does not wait for more)."""
    last = await last_event(bus, run_id)
    if last is None:
        return []
    events = []
    async for event in follow(bus, run_id):
        events.append(event)
        if event.seq >= last.seq:
            break
    return events
