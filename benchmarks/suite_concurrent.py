"""Many runs at once: total steps per second with one and with two planner processes.

Every role runs in a child process (``plancast worker``): the executors in one, each
planner (with a synthesizer) in its own; runs are shared among planners by the submit
subject's queue group. This process only submits the runs and follows their events, so
the planners' CPU time is read from their processes (``/proc/<pid>/stat``).
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from runtime.bus import Bus, open_bus
from runtime.testing import Latency, open_scripted_model_server

from . import scripted
from .config import BenchConfig
from .dag import Dag
from .deploy import new_prefix, settings_for
from .trace import run_goal
from .workers import cpu_seconds, wait_for_consumer, wait_for_planners, worker_process
from .workloads import fan_out

ROLE = "noop"


async def _burst(bus: Bus, dag: Dag, runs: int) -> float:
    """Submit ``runs`` runs of ``dag`` at once; seconds until the last one finished."""
    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(runs):
            tg.start_soon(run_goal, bus, scripted.goal_of(dag))
    return time.perf_counter() - start


async def _measure(nats_url: str, dag: Dag, runs: int, planners: int,
                   model_url: str, tmp: Path) -> dict[str, Any]:
    data = scripted.team_data(model_url, {ROLE: ["echo", "sleep"]}, concurrency=1024)
    team_file = tmp / f"team-{planners}.toml"
    team_file.write_text(scripted.team_toml(data))
    prefix = new_prefix()
    with contextlib.ExitStack() as stack:
        log = tmp / f"worker-{planners}.log"
        worker = stack.enter_context(worker_process(ROLE, team_file, nats_url, prefix, log))
        logs = [tmp / f"planner-{planners}-{i}.log" for i in range(planners)]
        procs = [stack.enter_context(worker_process(
            ["planner", "synthesizer"], team_file, nats_url, prefix, plog)) for plog in logs]
        async with open_bus(settings_for(nats_url, prefix)) as bus:
            await wait_for_consumer(bus, f"step-{ROLE}", worker, log)
            await wait_for_planners(bus, list(zip(procs, logs, strict=True)))
            await _burst(bus, dag, 2)  # warm-up
            cpu0 = [cpu_seconds(p.pid) for p in procs]
            wall = await _burst(bus, dag, runs)
            cpu = sum(cpu_seconds(p.pid) - c for p, c in zip(procs, cpu0, strict=True))
    steps = runs * len(dag)
    return {"planners": planners, "runs": runs, "steps_per_run": len(dag), "wall_s": wall,
            "steps_per_s": steps / wall, "planner_cpu_s": cpu,
            "planner_cpu_us": cpu / steps * 1e6}


async def run_concurrent(nats_url: str, config: BenchConfig,
                         progress: Callable[[str], None]) -> dict[str, Any]:
    """``config.concurrent_runs`` runs of a 1 → 8 → 1 fan-out (10 steps), all at once."""
    dag = fan_out(config.concurrent_width)
    instant = Latency(ttft=0.0, per_line=0.0)
    rules = [scripted.planner_rule(dag, scripted.NOOP_ROLES, instant),
             scripted.synthesizer_rule(0.0)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="plancast-bench-") as tmp:
        async with open_scripted_model_server(scripted.scenario(rules, 1.0)) as model:
            for planners in (1, 2):
                row = await _measure(nats_url, dag, config.concurrent_runs, planners,
                                     model.base_url, Path(tmp))
                rows.append(row)
                progress(f"concurrent: {planners} planner(s): {row['steps_per_s']:.0f} steps/s")
    return {"workload": dag.name, "rows": rows}
