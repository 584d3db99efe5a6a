"""A worker process for kill tests: ``python -m tests.durability.runner TEAM ROLE[,ROLE]``.

Like ``plancast worker``, plus the test tools (the kill tests' and the chaos suite's
``ledger``). Settings come from the environment (``NATS_URL``, ``PLANCAST_PREFIX``,
``PLANCAST_ACK_WAIT``, ``PLANCAST_PING_INTERVAL`` ...); ``PLANCAST_TEST_LOG=INFO`` logs to
stderr with times and the pid. Prints
``READY <pid>`` once its actors serve; drains on SIGTERM.

``PLANCAST_TEST_DIE`` makes the process SIGKILL itself at a named point, once per test
directory (the first process to reach it; a ``died-<point>`` file marks it):
``before-ack`` as it is about to acknowledge a step task, after its handler sent the
result; ``before-save:<name>`` as a planner is about to write run state after the task of
gate ``<name>`` was stored (the log shows it dispatched, the state does not).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from runtime.actor import build_team_actors
from runtime.bus import Bus, Delivery, open_bus
from runtime.config import Settings, load_team
from runtime.tools import builtin_tools
from runtime.worker import serve_actors

from ..chaos.ledger import chaos_tools
from .tools import kill_test_tools


async def main(team_file: str, roles: list[str]) -> None:
    team = load_team(Path(team_file))
    tools = builtin_tools()
    for tool in [*kill_test_tools(), *chaos_tools()]:
        tools.add(tool)
    async with open_bus(Settings()) as bus:
        if point := os.environ.get("PLANCAST_TEST_DIE"):
            die_at(point, bus)
        actors = build_team_actors(bus, team, tools, roles)
        async with anyio.create_task_group() as tg:
            await tg.start(partial(serve_actors, actors))
            print(f"READY {os.getpid()}", flush=True)


def die_at(point: str, bus: Bus) -> None:
    """Arrange to SIGKILL this process at ``point`` (see the module's docstring)."""
    if point == "before-ack":
        acknowledge = Delivery.ack

        async def ack(delivery: Delivery) -> None:
            if ".step." in delivery.subject:
                _die_once(point)
            await acknowledge(delivery)

        Delivery.ack = ack  # type: ignore[method-assign]
    elif point.startswith("before-save:"):
        _die_before_saving(bus, f'"name":"{point.partition(":")[2]}"'.encode())
    else:
        raise SystemExit(f"PLANCAST_TEST_DIE: unknown point {point!r}")


def _die_before_saving(bus: Bus, marker: bytes) -> None:
    """Die at the first write of run state after a task holding ``marker`` was stored."""
    js: Any = type(bus.js)
    publish, publish_async = js.publish, js.publish_async
    stored = False

    def mark(future: Any) -> None:
        nonlocal stored
        stored = stored or (not future.cancelled() and future.exception() is None)

    async def publish_soon(self: Any, subject: str, payload: bytes = b"", **kw: Any) -> Any:
        if stored and subject.startswith("$KV."):
            _die_once("before-save")
        future = await publish_async(self, subject, payload, **kw)
        if ".step." in subject and marker in payload:
            future.add_done_callback(mark)
        return future

    async def publish_now(self: Any, subject: str, payload: bytes = b"", **kw: Any) -> Any:
        if stored and subject.startswith("$KV."):
            _die_once("before-save")
        return await publish(self, subject, payload, **kw)

    js.publish, js.publish_async = publish_now, publish_soon


def _die_once(point: str) -> None:
    try:
        fd = os.open(Path(os.environ["PLANCAST_TEST_DIR"]) / f"died-{point}",
                     os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return  # another process died there already
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    if level := os.environ.get("PLANCAST_TEST_LOG"):
        logging.basicConfig(
            level=level, stream=sys.stderr,
            format="%(asctime)s.%(msecs)03d %(process)d %(name)s %(levelname)s %(message)s",
            datefmt="%H:%M:%S")
    anyio.run(main, sys.argv[1], sys.argv[2].split(","))
