"""Reading the current values of many keys of a JetStream KV bucket at once."""

from __future__ import annotations

from typing import Any

import anyio

READ_TIMEOUT = 10.0
"""Seconds to wait for a bucket's current values before giving up."""
WATCH_LINGER = 5.0
"""Seconds the server keeps a finished read's consumer (nats-py's default is 5 minutes:
planners that scan every second would pile up consumers until the server refuses more)."""


async def current_values(kv: Any, pattern: str) -> dict[str, Any]:
    """Every live key matching ``pattern`` (``*`` and ``>`` wildcards) with its latest entry.

    A watch with a server-side filter: it reads only the matching keys, unlike listing
    every key of the bucket.
    """
    found: dict[str, Any] = {}
    watcher = await kv.watch(pattern, ignore_deletes=True, inactive_threshold=WATCH_LINGER)
    try:
        with anyio.fail_after(READ_TIMEOUT):
            async for entry in watcher:
                if entry is None:  # the end of the current values
                    break
                found[entry.key] = entry
    finally:
        with anyio.CancelScope(shield=True):
            await watcher.stop()
    return found
