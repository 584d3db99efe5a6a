"""How many bytes of fetched objects a process holds at once.

An offloaded message is read whole before it is decoded, so each fetch holds up to its
declared size. Many envelopes arriving together (a burst, or a role naming the same large
object over and over) would hold them all at once; a budget makes them take turns.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio


class ByteBudget:
    """At most ``total`` bytes held by fetches at once; a larger one waits for room (one
    larger than the whole budget waits until it is alone)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self._freed = anyio.Event()

    @asynccontextmanager
    async def holding(self, size: int) -> AsyncIterator[None]:
        """Wait for room for ``size`` bytes, keep it while the block runs."""
        size = min(size, self.total)
        while self.used + size > self.total:
            await self._freed.wait()
        self.used += size
        try:
            yield
        finally:
            self.used -= size
            self._freed.set()
            self._freed = anyio.Event()
