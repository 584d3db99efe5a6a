"""The tasks an actor handles its messages in: reused while messages keep coming.

An anyio task costs more to start than a quick message costs to handle (a task, its own
cancel scope and an event, in a task group's books), so a task that has handled one
message waits a moment for the next instead of ending; one left idle ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from anyio.abc import TaskGroup

IDLE = 5.0
"""Seconds a handler task waits for another message before it ends."""


class HandlerTasks:
    """Runs ``handle(*args)`` once per ``submit``, each in a task of ``group`` (and of its
    cancel scope), in an idle task when there is one."""

    def __init__(self, group: TaskGroup, handle: Callable[..., Awaitable[None]]) -> None:
        self._group = group
        self._handle = handle
        self._idle: list[asyncio.Future[tuple[Any, ...] | None]] = []

    def submit(self, *args: Any) -> None:
        while self._idle:  # the task that went idle last: it is the most likely warm
            waiting = self._idle.pop()
            if not waiting.done():
                waiting.set_result(args)
                return
        self._group.start_soon(self._serve, args)

    async def _serve(self, args: tuple[Any, ...] | None) -> None:
        loop = asyncio.get_running_loop()
        while args is not None:
            await self._handle(*args)
            waiting: asyncio.Future[tuple[Any, ...] | None] = loop.create_future()
            timer = loop.call_later(IDLE, _end, waiting)
            self._idle.append(waiting)
            try:
                args = await waiting
            finally:
                timer.cancel()


def _end(waiting: asyncio.Future[tuple[Any, ...] | None]) -> None:
    if not waiting.done():
        waiting.set_result(None)
