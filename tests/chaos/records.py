"""When each attempt's result was recorded, read from the deployment's finished stream: the
moment from which another execution of the attempt is a repeat of a finished one."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from nats.js.errors import NotFoundError

from protocols import (
    UNREADABLE,
    StepClaimed,
    StepResult,
    Stream,
    Verb,
    decode,
    stream_name,
    subject,
)
from runtime.bus import Bus

Attempt = tuple[str, int, int]


async def recorded_times(bus: Bus, role: str,
                         attempts: Iterable[Attempt]) -> dict[Attempt, float] | None:
    """Unix time each attempt's record was stored (the server's time), for those recorded;
    None if the deployment keeps no records (a runtime before them)."""
    kind = getattr(Stream, "FINISHED", None)
    if kind is None:
        return None
    stream = stream_name(bus.prefix, kind)
    try:
        await bus.js.stream_info(stream)
    except NotFoundError:
        return None
    found: dict[Attempt, float] = {}
    for run_id, step, attempt in attempts:
        where = subject(bus.prefix, Verb.FINISHED, role, run_id, str(step), str(attempt))
        try:
            raw = await bus.js.get_msg(stream, subject=where, direct=True)
        except NotFoundError:
            continue
        try:  # the last word is the record, or the claim of an execution that never ended
            finished = isinstance(decode(raw.data or b"", StepResult | StepClaimed), StepResult)
        except UNREADABLE:
            finished = False
        stamp = (raw.headers or {}).get("Nats-Time-Stamp")
        if stamp and finished:
            found[(run_id, step, attempt)] = server_time(stamp)
    return found


def server_time(stamp: str) -> float:
    """An RFC 3339 time of the server (nanoseconds, ``Z``) as Unix time."""
    head, _, rest = stamp.rstrip("Z").partition(".")
    fraction = (rest + "000000")[:6]
    return datetime.fromisoformat(f"{head}.{fraction}+00:00").timestamp()
