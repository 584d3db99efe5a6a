"""Scripted-model scenarios and team configs for benchmark runs (all latencies explicit)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from runtime.config import TeamConfig, team_from_dict
from runtime.testing import Latency, Rule, Scenario, ScriptedToolCall

from .config import Latencies
from .dag import Dag

FINISH = json.dumps({"action": "finish", "answer": "benchmark done"})
"""The synthesizer's scripted decision."""

SHAPE_ROLES = {"search": "researcher", "math": "calculator"}
NOOP_ROLES = {"echo": "noop", "sleep": "noop"}


def marker(dag: Dag) -> str:
    """``[name]``: in a run's goal, it picks the DAG's scripted replies."""
    return f"[{dag.name}]"


def goal_of(dag: Dag) -> str:
    return f"benchmark {marker(dag)}"


def planner_rule(dag: Dag, role_of: dict[str, str], latency: Latency) -> Rule:
    """The planner streams the DAG's plan when the goal carries the DAG's marker."""
    return Rule(name=f"plan {dag.name}", role="planner", contains=marker(dag),
                lines=dag.plan_lines(role_of), latency=latency)


def synthesizer_rule(ttft: float) -> Rule:
    return Rule(name="join", role="synthesizer", text=FINISH, latency=Latency(ttft=ttft))


def react_rules(dag: Dag, lat: Latencies, reps: int) -> list[Rule]:
    """One tool call per step in plan order, then a final answer; each rule answers once."""
    rules: list[Rule] = []
    for _ in range(reps):
        for line in dag.plan_lines(SHAPE_ROLES):
            step = json.loads(line)
            call = ScriptedToolCall(name=step["tool"], arguments=step["args"])
            rules.append(Rule(name=f"react {dag.name} #{step['id']}", role="react", times=1,
                              contains=marker(dag), tool_calls=[call],
                              latency=Latency(ttft=lat.react_call)))
        rules.append(Rule(name=f"react {dag.name} answer", role="react", times=1,
                          contains=marker(dag), text="benchmark done",
                          latency=Latency(ttft=lat.synthesizer_ttft)))
    return rules


def scenario(rules: Iterable[Rule], time_scale: float) -> Scenario:
    """Exact delays (no jitter): the randomness lives in the tools' drawn times."""
    return Scenario(rules=list(rules), time_scale=time_scale, latency=Latency(jitter=0.0))


def team_data(base_url: str, executors: dict[str, list[str]], *, stream_plan: bool = True,
              concurrency: int = 256, tool_effects: str = "default",
              max_active_runs: int | None = None) -> dict[str, Any]:
    """A team as TOML-shaped data: planner, synthesizer and tool-only executor roles
    (``tool_effects``: what their tools declare, ``[tools.NAME] effects``;
    ``max_active_runs``: runs one planner takes on at once, the team's default if None)."""
    roles: dict[str, Any] = {
        "planner": {"kind": "planner", "model": "scripted",
                    "options": {"stream_plan": stream_plan}},
        "synthesizer": {"kind": "synthesizer", "model": "scripted"},
    }
    for name, tools in executors.items():
        roles[name] = {"tools": tools, "tool_steps_only": True, "concurrency": concurrency,
                       "description": f"runs {', '.join(tools)}"}
    model = {"model": "scripted-model", "base_url": base_url, "max_retries": 0}
    data: dict[str, Any] = {"models": {"scripted": model}, "roles": roles}
    if max_active_runs is not None:
        data["max_active_runs"] = max_active_runs
    if tool_effects != "default":
        data["tools"] = {t: {"effects": tool_effects}
                         for tools in executors.values() for t in tools}
    return data


def team(base_url: str, executors: dict[str, list[str]], **options: Any) -> TeamConfig:
    return team_from_dict(team_data(base_url, executors, **options), source="benchmark team")


def team_toml(data: dict[str, Any]) -> str:
    """``team_data`` as a TOML file for ``plancast worker --team`` (JSON values are TOML)."""
    lines = [f"{key} = {json.dumps(value)}" for key, value in data.items()
             if not isinstance(value, dict)]
    for name, model in data["models"].items():
        lines.append(f"[models.{name}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in model.items()]
    for name, role in data["roles"].items():
        lines.append(f"[roles.{name}]")
        for key, value in role.items():
            if isinstance(value, dict):
                inner = ", ".join(f"{k} = {json.dumps(v)}" for k, v in value.items())
                lines.append(f"{key} = {{ {inner} }}")
            else:
                lines.append(f"{key} = {json.dumps(value)}")
    for name, tool in data.get("tools", {}).items():
        lines.append(f"[tools.{name}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in tool.items()]
    return "\n".join(lines) + "\n"
