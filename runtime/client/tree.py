"""Following a run together with the sub-team runs under it (hierarchical teams).

A step of a ``team`` role names its child run on ``event.step.started`` (``child_run``),
so a subscriber that follows a run can follow each child as it appears, and each child's
children, and see the whole tree: ``plancast watch`` does this. A child that never starts
(its step ended first, or the root run did) is followed ``grace`` seconds more at most.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectSendStream

from protocols import TERMINAL_EVENTS, RunEvent, StepFailed, StepFinished, StepStarted, child_run_id

from ..bus import Bus
from .runs import follow

log = logging.getLogger(__name__)

GRACE = 5.0
"""Seconds the tree is still followed after the root run ended, for children to end."""

Handler = Callable[[str, RunEvent], Awaitable[None]]
"""Called with each event and the id of the run it belongs to, in each run's order."""


async def follow_tree(bus: Bus, run_id: str, handle: Handler, *, grace: float = GRACE,
                      max_runs: int = 1000) -> None:
    """Hand every event of the run and of its sub-team runs (at any depth) to ``handle``,
    until the root run and every child followed have ended (or ``grace`` seconds after the
    root's end). ``max_runs`` bounds how many runs are followed at once."""
    send, receive = anyio.create_memory_object_stream[tuple[str, RunEvent | None]](256)
    scopes: dict[str, anyio.CancelScope] = {}
    """The runs followed, each with the scope that stops following it."""
    heard: set[str] = set()
    ended: set[str] = set()
    async with anyio.create_task_group() as tg, send, receive:
        _start(tg, bus, run_id, send, scopes)
        deadline = float("inf")
        while ended != scopes.keys():
            with anyio.move_on_after(deadline - anyio.current_time()):
                rid, event = await receive.receive()
            if anyio.current_time() >= deadline:
                break
            if event is None:  # its follower stopped
                ended.add(rid)
                continue
            heard.add(rid)
            await handle(rid, event)
            if isinstance(event, StepStarted) and event.child_run \
                    and event.child_run not in scopes and len(scopes) < max_runs:
                _start(tg, bus, event.child_run, send, scopes)
            elif isinstance(event, StepFinished | StepFailed):
                child = child_run_id(rid, event.step_id, event.attempt)
                if child in scopes and child not in heard:  # its step ended before it began
                    scopes[child].deadline = anyio.current_time() + grace
            if rid == run_id and isinstance(event, TERMINAL_EVENTS):
                deadline = anyio.current_time() + grace
        tg.cancel_scope.cancel()


def _start(tg: TaskGroup, bus: Bus, run_id: str,
           send: MemoryObjectSendStream[tuple[str, RunEvent | None]],
           scopes: dict[str, anyio.CancelScope]) -> None:
    scopes[run_id] = anyio.CancelScope()
    tg.start_soon(_follow_one, bus, run_id, send.clone(), scopes[run_id])


async def _follow_one(bus: Bus, run_id: str,
                      send: MemoryObjectSendStream[tuple[str, RunEvent | None]],
                      scope: anyio.CancelScope) -> None:
    async with send:
        with scope:
            async for event in follow(bus, run_id):
                await send.send((run_id, event))
        await send.send((run_id, None))
