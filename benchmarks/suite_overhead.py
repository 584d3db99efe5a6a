"""Suite 2: per-step overhead of plancast with executors in a separate worker process.

The planner and the synthesizer run here; ``plancast worker --role noop`` runs the
steps in a child process; both talk through one nats-server with JetStream. The
scripted model answers at once (zero latency), so the makespan is runtime time plus
the steps' own time (``echo``: none; ``sleep``: the DAG's critical path).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from runtime.bus import Bus
from runtime.team import team_from_dict
from runtime.testing import Latency, open_scripted_model_server
from runtime.tools import builtin_tools

from . import scripted
from .config import BenchConfig
from .dag import Dag
from .deploy import deployment, new_prefix
from .stats import median
from .trace import RunTrace, run_goal
from .workers import wait_for_consumer, worker_process
from .workloads import chain

ROLE = "noop"


def summarize(dag: Dag, makespans: Sequence[float], spans: Sequence[float] = (),
              cpus: Sequence[float] = ()) -> dict[str, Any]:
    """p50 wall time, the bound, per-step overhead and throughput of one workload.

    ``spans`` (plancast only): first step planned → last step finished, per run;
    ``cpus``: the planner process's CPU seconds per run.
    """
    wall, bound = median(makespans), dag.critical_path()
    row = {
        "workload": dag.name, "steps": len(dag), "reps": len(makespans),
        "wall_s": wall, "walls_s": list(makespans), "bound_s": bound,
        "wall_over_bound": wall / bound if bound else None,
        "per_step_overhead_us": (wall - bound) / len(dag) * 1e6,
        "steps_per_s": len(dag) / wall,
    }
    if spans:
        span = median(spans)
        row |= {"steps_span_s": span, "fixed_ms": (wall - span) * 1000,
                "per_step_in_dag_us": (span - bound) / len(dag) * 1e6}
    if cpus:
        row["planner_cpu_us"] = median(cpus) / len(dag) * 1e6
    return row


async def timed_run(bus: Bus, dag: Dag) -> tuple[RunTrace, float]:
    """One run, and the CPU seconds this (the planner's) process spent on it."""
    cpu = time.process_time()
    trace = await run_goal(bus, scripted.goal_of(dag))
    return trace, time.process_time() - cpu


async def measure_plancast(nats_url: str, dags: Sequence[Dag], config: BenchConfig,
                           progress: Callable[[str], None]) -> list[dict[str, Any]]:
    """Each workload ``config.reps`` times through planner → NATS → worker process."""
    warmup = Dag("warmup", chain(3).nodes)
    instant = Latency(ttft=0.0, per_line=0.0)
    rules = [scripted.planner_rule(d, scripted.NOOP_ROLES, instant)
             for d in (warmup, *dags)]
    rules.append(scripted.synthesizer_rule(0.0))
    rows = []
    with tempfile.TemporaryDirectory(prefix="plancast-bench-") as tmp:
        async with open_scripted_model_server(scripted.scenario(rules, 1.0)) as model:
            data = scripted.team_data(model.base_url, {ROLE: ["echo", "sleep"]},
                                      concurrency=1024)
            team_file, log_file = Path(tmp) / "team.toml", Path(tmp) / "worker.log"
            team_file.write_text(scripted.team_toml(data))
            prefix = new_prefix()
            with worker_process(ROLE, team_file, nats_url, prefix, log_file) as proc:
                async with deployment(nats_url, team_from_dict(data),
                                      builtin_tools(plugins=False),
                                      roles=["planner", "synthesizer"], prefix=prefix) as bus:
                    await wait_for_consumer(bus, f"step-{ROLE}", proc, log_file)
                    await run_goal(bus, scripted.goal_of(warmup))
                    for dag in dags:
                        runs = [await timed_run(bus, dag)
                                for _ in range(config.reps_for(len(dag)))]
                        rows.append(summarize(dag, [t.makespan for t, _ in runs],
                                              [t.steps_span() for t, _ in runs],
                                              [c for _, c in runs]))
                        progress(f"overhead: plancast {dag.name} p50 {rows[-1]['wall_s']:.3f}s")
    return rows
