"""Two tiny deterministic tools for demos, tests and benchmarks: ``echo`` and ``sleep``."""

from __future__ import annotations

from typing import Annotated

import anyio
import msgspec

from ._base import FunctionTool, tool

MAX_SLEEP_SECONDS = 60.0


class EchoArgs(msgspec.Struct, forbid_unknown_fields=True):
    text: Annotated[str, msgspec.Meta(description="Text to return unchanged.")]


class SleepArgs(msgspec.Struct, forbid_unknown_fields=True):
    seconds: Annotated[
        float, msgspec.Meta(ge=0, le=MAX_SLEEP_SECONDS, description="How long to sleep.")
    ]


@tool(name="echo")
async def _echo(args: EchoArgs) -> str:
    """Return `text` unchanged."""
    return args.text


@tool(name="sleep")
async def _sleep(args: SleepArgs) -> str:
    """Wait `seconds` (at most 60) and say so; stands in for a slow tool."""
    await anyio.sleep(args.seconds)
    return f"slept {args.seconds:g} s"


echo_tool: FunctionTool[EchoArgs] = _echo
sleep_tool: FunctionTool[SleepArgs] = _sleep
