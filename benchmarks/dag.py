"""A benchmark DAG: steps with a tool, dependencies and a known duration; its plan and bounds."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property


@dataclass(frozen=True)
class Node:
    """One plan step."""

    id: int
    tool: str
    """``search``/``math`` (timed), ``echo`` (no-op) or ``sleep`` (fixed time)."""
    deps: tuple[int, ...] = ()
    seconds: float = 0.0
    """How long the tool runs (already scaled)."""


@dataclass(frozen=True)
class Dag:
    """Steps in plan (emission) order; ids are 1..n and dependencies point backwards."""

    name: str
    nodes: tuple[Node, ...]

    def __len__(self) -> int:
        return len(self.nodes)

    @cached_property
    def by_id(self) -> dict[int, Node]:
        return {n.id: n for n in self.nodes}

    @cached_property
    def dependents(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {n.id: [] for n in self.nodes}
        for node in self.nodes:
            for dep in node.deps:
                out[dep].append(node.id)
        return out

    @cached_property
    def tail(self) -> dict[int, float]:
        """Per step: the longest path of tool time from its start to the end of the DAG."""
        out: dict[int, float] = {}
        for node in reversed(self.nodes):
            after = max((out[d] for d in self.dependents[node.id]), default=0.0)
            out[node.id] = node.seconds + after
        return out

    def critical_path(self) -> float:
        """Tool time of the longest path: the makespan with every step planned at time 0."""
        return max(self.tail.values(), default=0.0)

    def total_work(self) -> float:
        return sum(n.seconds for n in self.nodes)

    def bound(self, planned_at: Mapping[int, float], plan_end: float = 0.0) -> float:
        """Earliest time every step can be done, given when each was planned (run-relative).

        ``max over steps of (planned_at + tail)``, and never before the plan ends.
        """
        ready = max((planned_at[n.id] + self.tail[n.id] for n in self.nodes), default=0.0)
        return max(ready, plan_end)

    def plan_lines(self, role_of: Mapping[str, str]) -> list[str]:
        """The plan as JSON Lines, as a planner model would stream it."""
        return [json.dumps(_step_object(n, role_of[n.tool], self.name), separators=(",", ":"))
                for n in self.nodes]


def _step_object(node: Node, role: str, shape: str) -> dict[str, object]:
    step: dict[str, object] = {"id": node.id, "role": role, "tool": node.tool}
    if node.tool == "math":  # the LLMCompiler style: inputs as $N references
        expr = " + ".join(f"${d}" for d in node.deps) or "1 + 1"
        step["args"] = {"shape": shape, "step": node.id, "text": expr}
        return step
    if node.tool == "search":
        step["args"] = {"shape": shape, "step": node.id, "text": f"query {node.id}"}
    elif node.tool == "sleep":
        step["args"] = {"seconds": node.seconds}
    else:
        step["args"] = {"text": f"s{node.id}"}
    if node.deps:
        step["depends_on"] = list(node.deps)
    return step
