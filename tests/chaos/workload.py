"""Seeded runs: a random DAG per run, the scripted model's rules for it, its known outputs.

Run ``i`` has the goal ``<chaos-run ID> ...``; the planner's rule matches that marker and
streams the plan as JSON Lines. A replan (after a step was given up) gets the same DAG
again with ids moved past the first round's, so every step's expected output is known in
either round. The synthesizer always finishes with ``ANSWER``.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from runtime.testing import Scenario, parse_scenario

from .ledger import ledger_output

ANSWER = "chaos done"
ROLE = "worker"


@dataclass(frozen=True)
class RunSpec:
    index: int
    run_id: str
    goal: str
    plan: list[dict[str, Any]]
    """The first round's plan lines."""
    replan: list[dict[str, Any]]
    """Every later round's plan lines: the same DAG, new ids."""
    expected: dict[int, str]
    """Each step id's output (both rounds)."""
    critical_path: float
    """Seconds of tool sleep along the longest dependency chain."""

    @property
    def marker(self) -> str:
        return f"<chaos-run {self.run_id}>"


def make_runs(seed: int, count: int, *, path_seconds: float) -> list[RunSpec]:
    """``count`` runs; each DAG's sleeps are scaled so its critical path is near
    ``path_seconds`` (long runs keep many in flight while faults happen)."""
    rng = random.Random(seed)
    return [_make_run(rng, seed, i, path_seconds * rng.uniform(0.6, 1.4))
            for i in range(1, count + 1)]


MAX_SLEEP = 6.0
"""No single step sleeps longer (a shallow DAG reaches its path length by breadth)."""


@dataclass(frozen=True)
class _Dag:
    deps: dict[int, list[int]]
    """``$N`` inputs of each step."""
    order: dict[int, list[int]]
    """``depends_on`` beyond the inputs (ordering only)."""
    sleeps: dict[int, float]
    echo: set[int]
    """Joins done by ``echo`` instead of ``ledger``."""


def _make_run(rng: random.Random, seed: int, index: int, path: float) -> RunSpec:
    run_id = f"c{seed}-{index:04d}"
    n = rng.randint(3, 8)
    deps: dict[int, list[int]] = {}
    order: dict[int, list[int]] = {}
    sleeps: dict[int, float] = {}
    echo: set[int] = set()
    for sid in range(1, n + 1):
        earlier = list(range(1, sid))
        shape = rng.random()
        if not earlier or shape < 0.25:
            deps[sid] = []  # a root: starts at once (fan-out from the plan)
        elif shape < 0.6:
            deps[sid] = [rng.choice(earlier)]  # a chain or a branch of a fan-out
        else:
            deps[sid] = sorted(rng.sample(earlier, min(len(earlier), rng.randint(2, 3))))
        unused = [e for e in earlier if e not in deps[sid]]
        order[sid] = [rng.choice(unused)] if unused and rng.random() < 0.15 else []
        sleeps[sid] = rng.uniform(0.2, 1.0)
        if len(deps[sid]) >= 2 and rng.random() < 0.4:
            echo.add(sid)
    scale = path / max(_finishes(deps, order, sleeps).values())
    sleeps = {sid: round(min(s * scale, MAX_SLEEP), 2) for sid, s in sleeps.items()}
    dag = _Dag(deps, order, sleeps, echo)
    plan, expected = _lines(dag, index, 0)
    replan, again = _lines(dag, index, n)
    goal = (f"<chaos-run {run_id}> compute a {n}-step DAG (seed {seed}); "
            "the scripted planner answers from the marker")
    path = max(_finishes(deps, order, sleeps).values())
    return RunSpec(index, run_id, goal, plan, replan, expected | again, path)


def _lines(dag: _Dag, index: int, offset: int) -> tuple[list[dict[str, Any]], dict[int, str]]:
    """The plan lines with ids moved ``offset`` on, and each step's output."""
    lines: list[dict[str, Any]] = []
    outputs: dict[int, str] = {}
    for sid, deps in sorted(dag.deps.items()):
        refs = [f"${d + offset}" for d in deps]
        line: dict[str, Any] = {"id": sid + offset, "role": ROLE, "title": f"step {sid}"}
        if sid in dag.echo:
            line |= {"tool": "echo", "args": {"text": "+".join(refs)}}
            outputs[sid] = "+".join(outputs[d] for d in deps)
        else:
            tag = f"r{index}s{sid}"
            line |= {"tool": "ledger",
                     "args": {"tag": tag, "inputs": refs, "sleep": dag.sleeps[sid]}}
            outputs[sid] = ledger_output(tag, [outputs[d] for d in deps])
        if dag.order[sid]:
            line["depends_on"] = [d + offset for d in dag.order[sid]]
        lines.append(line)
    return lines, {sid + offset: out for sid, out in outputs.items()}


def _finishes(deps: dict[int, list[int]], order: dict[int, list[int]],
              sleeps: dict[int, float]) -> dict[int, float]:
    """Each step's earliest finish, in seconds of sleep (ids only point backwards)."""
    finish: dict[int, float] = {}
    for sid in sorted(deps):
        before = [finish[d] for d in deps[sid] + order[sid]]
        finish[sid] = max(before, default=0.0) + sleeps[sid]
    return finish


def scenario(runs: list[RunSpec], *, per_line: float = 0.15) -> Scenario:
    """Rules for every run (replan first: its request also names the run), then the
    synthesizer's finish."""
    rules: list[dict[str, Any]] = []
    for spec in runs:
        rules.append({"name": f"{spec.run_id} replan", "role": "planner",
                      "contains": "A new plan is needed because", "any_contains": spec.marker,
                      "lines": [json.dumps(line) for line in spec.replan]})
        rules.append({"name": f"{spec.run_id} plan", "role": "planner",
                      "contains": spec.marker,
                      "lines": [json.dumps(line) for line in spec.plan]})
    rules.append({"name": "finish", "role": "synthesizer",
                  "text": json.dumps({"action": "finish", "answer": ANSWER})})
    document = {"rules": rules, "latency": {"ttft": 0.05, "per_line": per_line}}
    return parse_scenario(json.dumps(document), fmt="json")
