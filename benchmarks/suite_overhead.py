"""Suite 2: per-step overhead of plancast, every role in a child process.

``plancast worker --role planner --role synthesizer`` plans and joins in one child,
``plancast worker --role noop`` runs the steps in another, as in a deployment; both talk
through one nats-server with JetStream. This process only submits the runs, follows
their events and serves the scripted model, so the CPU figures are the children's own
(from /proc), not this process's. The scripted model answers at once (zero latency), so
the makespan is runtime time plus the steps' own time (``echo``: none; ``sleep``: the
DAG's critical path).
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.bus import Bus, open_bus
from runtime.testing import Latency, open_scripted_model_server

from . import scripted
from .config import BenchConfig
from .dag import Dag
from .deploy import new_prefix, settings_for
from .stats import median
from .stored import ended, per_step, stored
from .trace import RunTrace, run_goal
from .workers import (
    CLOCK_TICKS,
    cpu_seconds,
    wait_for_consumer,
    wait_for_planners,
    worker_process,
)
from .workloads import chain

ROLE = "noop"


def summarize(dag: Dag, makespans: Sequence[float],
              spans: Sequence[float] = ()) -> dict[str, Any]:
    """p50 wall time, the bound, per-step overhead and throughput of one workload.

    ``spans`` (plancast only): first step planned → last step finished, per run.
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
    return row


def cpu_figures(dag: Dag, runs: int, planner_s: float, executor_s: float) -> dict[str, Any]:
    """CPU per step: the CPU seconds summed over ``runs`` runs ÷ all their steps.

    /proc counts CPU in clock ticks, so a per-run median of ~100 ms figures would be mostly
    rounding; one sum over every run is off by at most one tick (``cpu_resolution_us``).
    """
    steps = len(dag) * runs
    return {"cpu_runs": runs, "planner_cpu_s": planner_s, "executor_cpu_s": executor_s,
            "planner_cpu_us": planner_s / steps * 1e6,
            "executor_cpu_us": executor_s / steps * 1e6,
            "cpu_resolution_us": 1e6 / CLOCK_TICKS / steps}


@dataclass(frozen=True)
class Children:
    """The two worker processes a measurement runs on, with their log files."""

    planner: subprocess.Popen[bytes]
    planner_log: Path
    executor: subprocess.Popen[bytes]
    executor_log: Path

    async def ready(self, bus: Bus) -> None:
        """Until the executor pulls steps and the planner takes submissions."""
        await wait_for_consumer(bus, f"step-{ROLE}", self.executor, self.executor_log)
        await wait_for_planners(bus, [(self.planner, self.planner_log)])

    def cpu(self) -> tuple[float, float]:
        """CPU seconds so far of (the planner process, the executor process)."""
        return cpu_seconds(self.planner.pid), cpu_seconds(self.executor.pid)


@contextlib.contextmanager
def children(team_file: Path, nats_url: str, prefix: str, tmp: Path) -> Iterator[Children]:
    """The executors' worker and the planner + synthesizer worker, stopped when done."""
    executor_log, planner_log = tmp / "executor.log", tmp / "planner.log"
    with worker_process(ROLE, team_file, nats_url, prefix, executor_log) as executor, \
            worker_process(["planner", "synthesizer"], team_file, nats_url, prefix,
                           planner_log) as planner:
        yield Children(planner, planner_log, executor, executor_log)


async def measure_workload(bus: Bus, dag: Dag, procs: Children,
                           config: BenchConfig) -> dict[str, Any]:
    """``config.reps_for`` runs for the wall figures; more runs (up to
    ``config.cpu_max_runs``) only while either process has spent less than
    ``config.cpu_min_s`` CPU on them, so the CPU figures stand above the clock tick."""
    reps = config.reps_for(len(dag))
    before = await stored(bus)
    start = procs.cpu()
    traces: list[RunTrace] = []
    while len(traces) < reps or (
            len(traces) < config.cpu_max_runs
            and min(now - then for now, then in zip(procs.cpu(), start, strict=True))
            < config.cpu_min_s):
        traces.append(await run_goal(bus, scripted.goal_of(dag)))
    planner_s, executor_s = (now - then for now, then in zip(procs.cpu(), start, strict=True))
    timed = traces[:reps]
    row = summarize(dag, [t.makespan for t in timed], [t.steps_span() for t in timed])
    await ended(bus, [t.events[0].run_id for t in traces[-1:]])
    delta = (await stored(bus)).since(before)
    counts = per_step(delta, len(dag) * len(traces))
    stored_row = {f"stored_{kind}": n for kind, n in counts.items()}
    return row | cpu_figures(dag, len(traces), planner_s, executor_s) | stored_row


async def measure_plancast(nats_url: str, dags: Sequence[Dag], config: BenchConfig,
                           progress: Callable[[str], None]) -> list[dict[str, Any]]:
    """Each workload through planner process → NATS → executor process."""
    warmup = Dag("warmup", chain(3).nodes)
    instant = Latency(ttft=0.0, per_line=0.0)
    rules = [scripted.planner_rule(d, scripted.NOOP_ROLES, instant)
             for d in (warmup, *dags)]
    rules.append(scripted.synthesizer_rule(0.0))
    rows = []
    with tempfile.TemporaryDirectory(prefix="plancast-bench-") as tmp:
        async with open_scripted_model_server(scripted.scenario(rules, 1.0)) as model:
            data = scripted.team_data(model.base_url, {ROLE: ["echo", "sleep"]},
                                      concurrency=1024, tool_effects=config.tool_effects)
            team_file = Path(tmp) / "team.toml"
            team_file.write_text(scripted.team_toml(data))
            prefix = new_prefix()
            with children(team_file, nats_url, prefix, Path(tmp)) as procs:
                async with open_bus(settings_for(nats_url, prefix)) as bus:
                    await procs.ready(bus)
                    await run_goal(bus, scripted.goal_of(warmup))
                    for dag in dags:
                        rows.append(await measure_workload(bus, dag, procs, config))
                        progress(f"overhead: plancast {dag.name} p50 {rows[-1]['wall_s']:.3f}s, "
                                 f"planner CPU {rows[-1]['planner_cpu_us']:.0f} µs/step")
    return rows
