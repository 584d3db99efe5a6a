"""Suite 1: LLMCompiler DAG shapes with scripted latencies; plancast streaming vs not vs ReAct.

One scripted server answers every shape (the goal's ``[shape]`` marker picks the plan);
one deployment per variant runs every shape, after a warm-up run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from runtime.testing import Latency, open_scripted_model_server
from runtime.tools import ToolRegistry

from . import scripted
from .config import BenchConfig
from .dag import Dag
from .deploy import deployment
from .react import run_react
from .shapes import all_shapes
from .stats import median, percentile
from .tools import timed_tools
from .trace import RunTrace, run_goal

EXECUTORS = {"researcher": ["search"], "calculator": ["math"]}


def ideal_bounds(dag: Dag, config: BenchConfig) -> tuple[float, float]:
    """Bounds with the scripted emission times (zero runtime cost): streaming, and not."""
    lat, scale = config.latencies, config.time_scale
    planned = {n.id: (lat.planner_ttft + i * lat.planner_per_line) * scale
               for i, n in enumerate(dag.nodes)}
    plan_end = max(planned.values())
    join = lat.synthesizer_ttft * scale
    return dag.bound(planned, plan_end) + join, plan_end + dag.critical_path() + join


async def _variant(nats_url: str, base_url: str, dags: Sequence[Dag], tools: ToolRegistry,
                   config: BenchConfig, stream_plan: bool,
                   progress: Callable[[str], None]) -> dict[str, list[RunTrace]]:
    """Every shape ``config.reps`` times on one deployment (streaming on or off)."""
    name = "streaming" if stream_plan else "non-streaming"
    team = scripted.team(base_url, EXECUTORS, stream_plan=stream_plan)
    traces: dict[str, list[RunTrace]] = {}
    async with deployment(nats_url, team, tools) as bus:
        await run_goal(bus, scripted.goal_of(dags[0]))  # warm-up: connections, consumers
        for dag in dags:
            traces[dag.name] = [await run_goal(bus, scripted.goal_of(dag))
                                for _ in range(config.reps)]
            spans = [t.makespan for t in traces[dag.name]]
            progress(f"shapes: {dag.name} {name} p50 {median(spans):.3f}s")
    return traces


def shape_row(dag: Dag, config: BenchConfig, streaming: list[RunTrace],
              batch: list[RunTrace], react: list[float]) -> dict[str, Any]:
    """The figures of one shape's table row."""
    join = config.latencies.synthesizer_ttft * config.time_scale
    bounds = [dag.bound(t.planned_at(), t.plan_end()) + join for t in streaming]
    ratios = [t.makespan / b for t, b in zip(streaming, bounds, strict=True)]
    waits = [w for t in streaming for w in t.ready_to_start()]
    ideal, ideal_batch = ideal_bounds(dag, config)
    makespan = median([t.makespan for t in streaming])
    batch_makespan, react_time = median([t.makespan for t in batch]), median(react)
    return {
        "shape": dag.name, "steps": len(dag),
        "critical_path_s": dag.critical_path(), "tool_work_s": dag.total_work(),
        "makespan_s": makespan, "makespans_s": [t.makespan for t in streaming],
        "bound_s": median(bounds), "makespan_over_bound": median(ratios),
        "ideal_bound_s": ideal, "makespan_over_ideal": makespan / ideal,
        "non_streaming_s": batch_makespan, "non_streaming_ideal_bound_s": ideal_batch,
        "streaming_speedup": batch_makespan / makespan,
        "react_s": react_time, "speedup_vs_react": react_time / makespan,
        "ready_to_start_p50_ms": percentile(waits, 50) * 1000,
        "ready_to_start_p99_ms": percentile(waits, 99) * 1000,
    }


async def run_shapes(nats_url: str, config: BenchConfig,
                     progress: Callable[[str], None]) -> dict[str, Any]:
    """The shapes suite on a running nats-server."""
    lat = config.latencies
    dags = all_shapes(config)
    plan_latency = Latency(ttft=lat.planner_ttft, per_line=lat.planner_per_line)
    rules = [scripted.planner_rule(d, scripted.SHAPE_ROLES, plan_latency) for d in dags]
    rules.append(scripted.synthesizer_rule(lat.synthesizer_ttft))
    rules += [r for d in dags for r in scripted.react_rules(d, lat, config.react_reps)]
    tools = timed_tools(dags)
    async with open_scripted_model_server(scripted.scenario(rules, config.time_scale)) as model:
        streaming = await _variant(nats_url, model.base_url, dags, tools, config, True, progress)
        batch = await _variant(nats_url, model.base_url, dags, tools, config, False, progress)
        react: dict[str, list[float]] = {}
        for dag in dags:
            react[dag.name] = [await run_react(model.base_url, scripted.goal_of(dag), tools,
                                               len(dag)) for _ in range(config.react_reps)]
            progress(f"shapes: {dag.name} ReAct p50 {median(react[dag.name]):.3f}s")
    rows = [shape_row(d, config, streaming[d.name], batch[d.name], react[d.name]) for d in dags]
    return {"time_scale": config.time_scale, "reps": config.reps,
            "react_reps": config.react_reps, "latencies": asdict(lat), "rows": rows}
