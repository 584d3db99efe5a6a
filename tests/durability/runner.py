"""A worker process for kill tests: ``python -m tests.durability.runner TEAM ROLE[,ROLE]``.

Like ``plancast worker``, plus the test tools (the kill tests' and the chaos suite's
``ledger``). Settings come from the environment (``NATS_URL``, ``PLANCAST_PREFIX``,
``PLANCAST_ACK_WAIT``, ``PLANCAST_PING_INTERVAL`` ...); ``PLANCAST_TEST_LOG=INFO`` logs to
stderr with times and the pid. Prints
``READY <pid>`` once its actors serve; drains on SIGTERM.
"""

from __future__ import annotations

import logging
import os
import sys
from functools import partial
from pathlib import Path

import anyio

from runtime.actor import build_team_actors
from runtime.bus import open_bus
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
        actors = build_team_actors(bus, team, tools, roles)
        async with anyio.create_task_group() as tg:
            await tg.start(partial(serve_actors, actors))
            print(f"READY {os.getpid()}", flush=True)


if __name__ == "__main__":
    if level := os.environ.get("PLANCAST_TEST_LOG"):
        logging.basicConfig(
            level=level, stream=sys.stderr,
            format="%(asctime)s.%(msecs)03d %(process)d %(name)s %(levelname)s %(message)s",
            datefmt="%H:%M:%S")
    anyio.run(main, sys.argv[1], sys.argv[2].split(","))
