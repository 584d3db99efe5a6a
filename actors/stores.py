"""A full results stream fails the runs waiting on it, naming the limit, instead of a hang.

Executors store their outcomes in the results stream; when it is full the server refuses
them, and the planner, who reads that stream, hears of nothing: its runs would wait
forever. So each planner looks at the stream every few seconds, and once it has had no
room for a message of the deployment's largest size for ``[timeouts] storage`` seconds of
a run's life, that run fails (cause ``storage``) saying which stream and which setting.
Failed runs give up their consumers, and with them whatever the stream kept for them: the
room comes back, and so do new runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

import anyio

from protocols import Stream, stream_name
from runtime.bus import Bus

from .run import Run, RunFailure

log = logging.getLogger(__name__)

LOOKS = 4
"""Looks at the stream per ``[timeouts] storage`` (at most one every ``MAX_PAUSE`` s)."""
MAX_PAUSE = 5.0


def has_room(info: Any, message_bytes: int) -> bool:
    """Whether the stream takes one more message of the largest size."""
    most = info.config.max_bytes or -1
    return most <= 0 or info.state.bytes + message_bytes <= most


async def watch_results(bus: Bus, grace: float, message_bytes: int,
                        runs: Callable[[], Iterable[Run]]) -> None:
    """Fail a planner's ``runs`` while the results stream stays full for ``grace`` seconds
    of their lives, without room for a message of ``message_bytes`` (runs beside them)."""
    stream = stream_name(bus.prefix, Stream.RESULTS)
    full_since: float | None = None
    while True:
        await anyio.sleep(min(grace / LOOKS, MAX_PAUSE))
        try:
            info = await bus.js.stream_info(stream)
        except Exception as exc:  # a bus hiccup: look again next time
            log.debug("could not look at stream %s: %s", stream, exc)
            continue
        if has_room(info, message_bytes):
            full_since = None
            continue
        now = time.time()
        full_since = full_since or now
        reason = (f"stream {stream} is full ({info.state.bytes} bytes of its max_bytes "
                  f"{info.config.max_bytes}, PLANCAST_MAX_STREAM_BYTES): the outcomes of the "
                  "run's work cannot be stored; raise PLANCAST_MAX_STREAM_BYTES (then "
                  "`plancast provision`) or find what fills it")
        for run in list(runs()):
            if run.record.status == "active" and run.failure is None \
                    and now - max(full_since, run.record.started_at) >= grace:
                log.warning("run %s: %s", run.run_id, reason)
                run.abort(RunFailure("runtime", reason, "storage"))
