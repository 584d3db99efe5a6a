"""Serve a set of actors in one process until SIGTERM/SIGINT, then drain them in order."""

from __future__ import annotations

import logging
import signal
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial

import anyio

from .. import telemetry
from ..actor import Actor, build_team_actors
from ..bus import Bus, open_bus
from ..config import Settings, TeamConfig
from ..tools import ToolRegistry, open_mcp_tools
from .supervisor import ChildSpec, Restart, Strategy, Supervisor

log = logging.getLogger(__name__)


async def serve_actors(
    actors: Sequence[Actor], *, stop: anyio.Event | None = None, handle_signals: bool = True,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run every actor under a one-for-one supervisor until SIGTERM, SIGINT or ``stop``.

    An actor that crashes is restarted with backoff; one that crashes more often than
    the restart intensity allows stops them all and raises ``SupervisorEscalation``.
    Stopping drains: actors stop taking work, finish what is in hand (bounded by the
    drain timeout), hand the rest back to JetStream, then return.
    """
    stop = stop or anyio.Event()
    settings = actors[0].settings if actors else Settings()
    telemetry.configure(settings)
    try:
        await _serve(actors, settings, stop, handle_signals, task_status)
    finally:
        if telemetry.enabled():  # spans go out before the process exits
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(telemetry.flush)


async def _serve(actors: Sequence[Actor], settings: Settings, stop: anyio.Event,
                 handle_signals: bool, task_status: anyio.abc.TaskStatus[None]) -> None:
    supervisor = Supervisor(
        [ChildSpec(f"{a.name}/{a.instance}", a.serve, Restart.TRANSIENT) for a in actors],
        strategy=Strategy.ONE_FOR_ONE,
        max_restarts=settings.max_restarts,
        period=settings.restart_period,
    )
    async with anyio.create_task_group() as tg:
        async with anyio.create_task_group() as watcher:
            if handle_signals:
                # Before any actor starts: a SIGTERM while they still start (a worker that
                # waits for its streams) drains them, it does not kill the process.
                await watcher.start(_signal_watch, stop)
            tg.start_soon(supervisor.run)
            await _started(actors, stop)
            task_status.started()
            await stop.wait()
            watcher.cancel_scope.cancel()
        log.info("draining %d actor(s)", len(actors))
        for actor in actors:
            actor.drain()
        # The supervisor returns once every actor has drained, but not after forever.
        tg.cancel_scope.deadline = anyio.current_time() + max(
            (a.settings.drain_timeout for a in actors), default=0.0
        ) + 5.0


async def _started(actors: Sequence[Actor], stop: anyio.Event) -> None:
    """Returns once every actor serves, or once it is asked to stop before they all do."""
    async with anyio.create_task_group() as tg:
        async def serving() -> None:
            for actor in actors:
                await actor.serving.wait()
            tg.cancel_scope.cancel()

        async def stopped() -> None:
            await stop.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(serving)
        tg.start_soon(stopped)


async def _signal_watch(stop: anyio.Event, *,
                        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
                        ) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        async for signum in signals:
            log.info("received %s", signal.Signals(signum).name)
            stop.set()
            return


@asynccontextmanager
async def open_deployment(
    settings: Settings, team: TeamConfig, tools: ToolRegistry, *,
    roles: list[str] | None = None, handle_signals: bool = False, serves: str | None = None,
) -> AsyncIterator[Bus]:
    """Start the team's MCP servers, connect (or start an embedded server, recorded as
    serving ``serves``: see ``open_bus``), serve the team's actors, yield the bus.

    On exit the actors drain before the connection closes.
    """
    async with open_mcp_tools(team, roles) as mcp_tools, \
            open_bus(settings, serves=serves) as bus:
        tools = ToolRegistry([*tools, *mcp_tools]) if mcp_tools else tools
        actors = build_team_actors(bus, team, tools, roles)  # a team mistake raises as itself
        async with anyio.create_task_group() as tg:
            stop = anyio.Event()
            await tg.start(partial(serve_actors, actors, stop=stop,
                                   handle_signals=handle_signals))
            try:
                yield bus
            finally:
                stop.set()
