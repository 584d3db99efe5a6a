"""Tools for kill tests: they mark when they run and wait for the test's go-ahead.

Files live in ``$PLANCAST_TEST_DIR``: ``<name>.<delivery>.started`` (holding the pid)
when a step starts, ``<name>.release`` to let a first delivery finish, and
``ledger.txt`` for side effects keyed by the execution (run/step/attempt/delivery).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import anyio
import msgspec

from runtime.tools import FunctionTool, current_step


class GateArgs(msgspec.Struct, frozen=True):
    name: str
    ledger: bool = False
    """Append this execution's key to the ledger first (a side effect before the ack)."""


def _dir() -> Path:
    return Path(os.environ["PLANCAST_TEST_DIR"])


async def gate(args: GateArgs) -> str:
    """First delivery: mark, then wait for ``<name>.release``; redeliveries pass at once."""
    ctx = current_step.get()
    assert ctx is not None, "gate runs only inside a step"
    if args.ledger:
        with (_dir() / "ledger.txt").open("a") as ledger:
            ledger.write(f"{ctx.key} {ctx.executor}\n")
    (_dir() / f"{args.name}.{ctx.delivery}.started").write_text(str(os.getpid()))
    if ctx.delivery == 1:
        release = _dir() / f"{args.name}.release"
        while not release.exists():
            await anyio.sleep(0.05)
    return f"{args.name} passed"


class Nothing(msgspec.Struct, frozen=True):
    pass


async def crash(args: Nothing) -> str:
    """A bug in a tool: not a ToolError, so the executor's handler itself fails."""
    raise RuntimeError("a bug, not a tool failure")


async def die(args: Nothing) -> str:
    """The executor process dies mid-step, every time."""
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def kill_test_tools() -> list[FunctionTool[Any]]:
    return [
        FunctionTool(gate, name="gate", description="a step the test controls",
                     args_type=GateArgs),
        FunctionTool(crash, name="crash", description="raises", args_type=Nothing),
        FunctionTool(die, name="die", description="kills its process", args_type=Nothing),
    ]
