"""Many runs at once: total steps per second with one and with two planner processes, one
planner on a loaded machine, and the bus alone at the same load (``floor_concurrent``).

Every role runs in a child process (``plancast worker``): the executors in one, each
planner (with a synthesizer) in its own; runs are shared among planners by the submit
subject's queue group. This process only submits the runs and follows their events, so
every process's CPU time is read apart (``/proc/<pid>/stat``): planners, executors,
nats-server and this one. Each run's ``RunStarted.planner`` says which planner ran it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio

from protocols import RunStarted
from runtime.bus import Bus, open_bus
from runtime.testing import Latency, open_scripted_model_server

from . import scripted
from .config import BenchConfig
from .dag import Dag
from .deploy import new_prefix, settings_for
from .floor_concurrent import run_concurrent_floor
from .stored import KINDS, ended, stored
from .trace import RunTrace, run_goal
from .workers import cpu_seconds, wait_for_consumer, wait_for_planners, worker_process
from .workloads import fan_out

ROLE = "noop"
SPLIT_LIMIT = 0.6
"""The most of the runs one of two planners may take for the split to count as even."""
BUSY_LOOP = "while True: pass"
"""The loaded row's load: one such child process per core, at this process's priority."""


async def _burst(bus: Bus, dag: Dag, runs: int) -> tuple[float, list[RunTrace]]:
    """Submit ``runs`` runs of ``dag`` at once; seconds until the last one finished, and
    the runs' traces."""
    traces: list[RunTrace] = []

    async def one() -> None:
        traces.append(await run_goal(bus, scripted.goal_of(dag)))

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(runs):
            tg.start_soon(one)
    return time.perf_counter() - start, traces


def split(traces: Sequence[RunTrace], planners: int) -> dict[str, Any]:
    """How many runs each planner ran (``RunStarted.planner``), most first, and whether
    the largest share is within ``SPLIT_LIMIT``."""
    counts = Counter(next(e.planner for e in t.events if isinstance(e, RunStarted))
                     for t in traces)
    shares = sorted(counts.values(), reverse=True) + [0] * (planners - len(counts))
    even = max(shares) <= SPLIT_LIMIT * len(traces) if planners > 1 else None
    return {"runs_per_planner": "/".join(map(str, shares)), "split_even": even}


@contextlib.contextmanager
def busy_children(count: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` CPU-bound child processes until the block ends."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(count):
            procs.append(subprocess.Popen([sys.executable, "-c", BUSY_LOOP],
                                          stdin=subprocess.DEVNULL))
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


async def _measure(nats_url: str, dag: Dag, runs: int, planners: int, model_url: str,
                   tmp: Path, server_pid: int | None, load: int = 0,
                   tool_effects: str = "default") -> dict[str, Any]:
    data = scripted.team_data(model_url, {ROLE: ["echo", "sleep"]}, concurrency=1024,
                              tool_effects=tool_effects)
    tag = f"{planners}-{load}"
    team_file = tmp / f"team-{tag}.toml"
    team_file.write_text(scripted.team_toml(data))
    prefix = new_prefix()
    with contextlib.ExitStack() as stack:
        log = tmp / f"worker-{tag}.log"
        worker = stack.enter_context(worker_process(ROLE, team_file, nats_url, prefix, log))
        logs = [tmp / f"planner-{tag}-{i}.log" for i in range(planners)]
        procs = [stack.enter_context(worker_process(
            ["planner", "synthesizer"], team_file, nats_url, prefix, plog)) for plog in logs]
        async with open_bus(settings_for(nats_url, prefix)) as bus:
            await wait_for_consumer(bus, f"step-{ROLE}", worker, log)
            await wait_for_planners(bus, list(zip(procs, logs, strict=True)))
            await _burst(bus, dag, 2)  # warm-up
            busy = stack.enter_context(busy_children(load))
            pids = {"planner": [p.pid for p in procs], "executor": [worker.pid],
                    "nats": [server_pid] if server_pid else [], "bench": [os.getpid()],
                    "load": [p.pid for p in busy]}
            before = await stored(bus)
            cpu0 = {k: [cpu_seconds(pid) for pid in v] for k, v in pids.items()}
            wall, traces = await _burst(bus, dag, runs)
            cpu = {f"cpu_{k}_s": sum(cpu_seconds(pid) - c
                                     for pid, c in zip(v, cpu0[k], strict=True))
                   for k, v in pids.items() if v}
            await ended(bus, [t.events[0].run_id for t in traces])
            delta = (await stored(bus)).since(before)
    steps = runs * len(dag)
    what = f"plancast, {planners} planner{'s' if planners > 1 else ''}"
    return {"what": what + (f", {load} busy loop(s) beside" if load else ""),
            "planners": planners, "load": load, "runs": runs, "steps_per_run": len(dag),
            "wall_s": wall, "steps_per_s": steps / wall,
            "planner_cpu_s": cpu["cpu_planner_s"],
            "planner_cpu_us": cpu["cpu_planner_s"] / steps * 1e6,
            "stored_per_run": sum(delta[k] for k in KINDS) / runs,
            "api_per_run": delta["api"] / runs,
            "stored_kinds_per_run": {k: delta[k] / runs for k in KINDS},
            **cpu, **split(traces, planners)}


async def run_concurrent(nats_url: str, config: BenchConfig, progress: Callable[[str], None],
                         server_pid: int | None = None) -> dict[str, Any]:
    """``config.concurrent_runs`` runs of a 1 → 8 → 1 fan-out (10 steps), all at once: with
    one and two planners, with one planner beside a busy loop per core, and the bus alone."""
    dag = fan_out(config.concurrent_width)
    instant = Latency(ttft=0.0, per_line=0.0)
    rules = [scripted.planner_rule(dag, scripted.NOOP_ROLES, instant),
             scripted.synthesizer_rule(0.0)]
    rows = []
    load = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="plancast-bench-") as tmp:
        async with open_scripted_model_server(scripted.scenario(rules, 1.0)) as model:
            for planners, busy in ((1, 0), (2, 0), (1, load)):
                row = await _measure(nats_url, dag, config.concurrent_runs, planners,
                                     model.base_url, Path(tmp), server_pid, busy,
                                     config.tool_effects)
                rows.append(row)
                progress(f"concurrent: {row['what']}: {row['steps_per_s']:.0f} steps/s, "
                         f"runs per planner {row['runs_per_planner']}")
    floor = await run_concurrent_floor(nats_url, config, server_pid, progress)
    quiet = rows[0]["steps_per_s"]
    return {"workload": dag.name, "rows": rows, "floor": floor,
            "tool_effects": config.tool_effects,
            "loaded_over_quiet": rows[2]["steps_per_s"] / quiet,
            "plancast_over_floor": quiet / floor["steps_per_s"]}
