"""The shapes suite's tools: ``search`` and ``math`` that take the step's drawn time."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import anyio
import msgspec

from runtime.tools import StructTool, ToolRegistry

from .dag import Dag


class TimedArgs(msgspec.Struct, forbid_unknown_fields=True):
    shape: str
    """The benchmark shape; with ``step`` it keys the drawn time."""
    step: int
    """The plan step calling the tool."""
    text: str
    """The query or expression (``$N`` references already substituted)."""


class TimedTool(StructTool[TimedArgs]):
    """Sleeps the time drawn for the calling step, then answers a short text."""

    args_type = TimedArgs

    def __init__(self, name: str, seconds: Mapping[tuple[str, int], float]) -> None:
        self.name = name
        self.description = f"scripted {name}: sleeps the benchmark's drawn time for the step"
        self.seconds = seconds

    async def call(self, args: TimedArgs) -> str:
        await anyio.sleep(self.seconds[args.shape, args.step])
        return f"{self.name}#{args.step}"


def timed_tools(dags: Iterable[Dag]) -> ToolRegistry:
    """``search`` and ``math`` for these DAGs' drawn times."""
    seconds = {(d.name, n.id): n.seconds for d in dags for n in d.nodes}
    return ToolRegistry([TimedTool("search", seconds), TimedTool("math", seconds)])
