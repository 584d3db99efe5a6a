"""Tools for kill tests: they mark when they run and wait for the test's go-ahead.

Files live in ``$PLANCAST_TEST_DIR``: ``<name>.<delivery>.started`` (holding the pid)
when a step starts, ``<name>.release`` to let a first delivery finish (``.stopped`` if its
executor cancelled it instead), and
``ledger.txt`` for side effects keyed by the execution (run/step/attempt/delivery).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import anyio
import msgspec

from runtime.tools import FunctionTool, ToolError, current_step


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
        try:
            while not release.exists():
                await anyio.sleep(0.05)
        except anyio.get_cancelled_exc_class():  # its executor stopped it
            (_dir() / f"{args.name}.{ctx.delivery}.stopped").write_text(str(os.getpid()))
            raise
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


class KeyedArgs(msgspec.Struct, frozen=True):
    name: str
    fail_redelivered: bool = False
    """Attempt 1's redelivery fails before acting (a known failure: a deliberate retry)."""


async def keyed(args: KeyedArgs) -> str:
    """Notes the idempotency key each execution sees (``<name>.keys``: attempt, delivery,
    key), then holds attempt 1's first delivery until ``<name>.release``."""
    ctx = current_step.get()
    assert ctx is not None, "keyed runs only inside a step"
    with (_dir() / f"{args.name}.keys").open("a") as keys:
        keys.write(f"{ctx.attempt} {ctx.delivery} {ctx.idempotency_key}\n")
    (_dir() / f"{args.name}.{ctx.attempt}.{ctx.delivery}.started").write_text(str(os.getpid()))
    if (ctx.attempt, ctx.delivery) == (1, 1):
        while not (_dir() / f"{args.name}.release").exists():
            await anyio.sleep(0.05)
    if args.fail_redelivered and ctx.attempt == 1 and ctx.delivery > 1:
        raise ToolError("refused before acting (a test's known failure)")
    return f"{args.name} done"


async def effect(args: GateArgs) -> str:
    """A side effect keyed by the idempotency key: ``effects.txt`` gets ``key output``
    (the act), then attempt 1's first delivery waits for ``<name>.release``."""
    ctx = current_step.get()
    assert ctx is not None, "effect runs only inside a step"
    output = f"{args.name} acted in attempt {ctx.attempt}"
    with (_dir() / "effects.txt").open("a") as effects:
        effects.write(f"{ctx.idempotency_key} {output}\n")
    (_dir() / f"{args.name}.{ctx.attempt}.{ctx.delivery}.started").write_text(str(os.getpid()))
    if (ctx.attempt, ctx.delivery) == (1, 1):
        while not (_dir() / f"{args.name}.release").exists():
            await anyio.sleep(0.05)
    return output


async def check_effect(key: str) -> str | None:
    """``effect``'s check hook: the output of the act done under ``key``, if any."""
    path = _dir() / "effects.txt"
    lines = path.read_text().splitlines() if path.exists() else []
    with (_dir() / "checked.txt").open("a") as checked:
        checked.write(f"{key}\n")
    return next((line.split(" ", 1)[1] for line in lines if line.split(" ", 1)[0] == key),
                None)


def kill_test_tools() -> list[FunctionTool[Any]]:
    return [
        FunctionTool(keyed, name="keyed", description="notes its idempotency key",
                     args_type=KeyedArgs),
        FunctionTool(effect, name="effect", description="acts once per key",
                     args_type=GateArgs),
        FunctionTool(effect, name="checked_effect", description="acts once per key; can "
                     "check by key", args_type=GateArgs, check=check_effect),
        FunctionTool(gate, name="gate", description="a step the test controls",
                     args_type=GateArgs),
        FunctionTool(crash, name="crash", description="raises", args_type=Nothing),
        FunctionTool(die, name="die", description="kills its process", args_type=Nothing),
    ]
