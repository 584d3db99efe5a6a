"""The overhead and peer workloads: a chain, a 1 → N → 1 fan-out and independent steps."""

from __future__ import annotations

from .config import BenchConfig
from .dag import Dag, Node


def _name(base: str, seconds: float) -> str:
    return f"{base}@{seconds * 1000:g}ms" if seconds else base


def chain(n: int, seconds: float = 0.0) -> Dag:
    """``n`` steps, each needing the one before."""
    tool = "sleep" if seconds else "echo"
    nodes = [Node(i, tool, (i - 1,) if i > 1 else (), seconds) for i in range(1, n + 1)]
    return Dag(_name(f"chain-{n}", seconds), tuple(nodes))


def fan_out(n: int, seconds: float = 0.0) -> Dag:
    """One step, ``n`` steps that need it, one step that needs them all."""
    tool = "sleep" if seconds else "echo"
    middle = tuple(range(2, n + 2))
    nodes = [Node(1, tool, (), seconds)]
    nodes += [Node(i, tool, (1,), seconds) for i in middle]
    nodes.append(Node(n + 2, tool, middle, seconds))
    return Dag(_name(f"fan-out-1-{n}-1", seconds), tuple(nodes))


def independent(n: int, seconds: float = 0.0) -> Dag:
    """``n`` steps with no dependencies."""
    tool = "sleep" if seconds else "echo"
    nodes = tuple(Node(i, tool, (), seconds) for i in range(1, n + 1))
    return Dag(_name(f"independent-{n}", seconds), nodes)


def workloads(config: BenchConfig, seconds: float = 0.0) -> list[Dag]:
    """The three workloads, no-op (``seconds`` 0) or timed."""
    return [chain(config.chain, seconds), fan_out(config.fan, seconds),
            independent(config.independent, seconds)]


def kind_of(dag: Dag) -> str:
    """``chain``, ``fan-out`` or ``independent``: how peers build the workload."""
    for kind in ("chain", "fan-out", "independent"):
        if dag.name.startswith(kind):
            return kind
    raise ValueError(f"{dag.name!r} is not an overhead workload")
