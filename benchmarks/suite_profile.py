"""Suite 4: where a step's time goes. Profiles the chain and fan-out runs, all roles in-process.

cProfile gives the functions with the most CPU time (self and cumulative, our packages
first); pyinstrument, when installed, adds a sampled call tree of the same run.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runtime.bus import Bus
from runtime.testing import Latency, open_scripted_model_server
from runtime.tools import builtin_tools

from . import scripted
from .config import BenchConfig
from .dag import Dag
from .deploy import deployment
from .trace import run_goal
from .workloads import chain, fan_out, independent

OURS = r"(runtime|actors|protocols)/"
"""pstats filter: plancast's own modules."""

COUNTED = {
    "socket send() syscalls": ("~", "<method 'send' of '_socket.socket' objects>"),
    "wire messages encoded": ("protocols/codec.py", "encode"),
    "run-state snapshots": ("actors/run/state.py", "snapshot"),
    "msgspec JSON decodes": ("~", "<method 'decode' of 'msgspec.json.Decoder' objects>"),
}
"""(file, function) pairs, all synchronous, whose calls per step say what a step costs."""


def _stats_text(profile: cProfile.Profile, sort: str, limit: int, only: str | None = None) -> str:
    """The top ``limit`` functions by ``sort``; ``only`` keeps paths matching a regex."""
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    if only is None:
        stats.strip_dirs()
    stats.sort_stats(sort)
    stats.print_stats(*([only] if only else []), limit)
    return out.getvalue()


def per_step_counts(profile: cProfile.Profile, steps: int) -> dict[str, float]:
    """Calls per step of the ``COUNTED`` functions (0 when a function does not exist)."""
    counts = dict.fromkeys(COUNTED, 0.0)
    stats: Any = pstats.Stats(profile)  # .stats: {(file, line, name): (primitive calls, ...)}
    for (file, _, name), (primitive, *_rest) in stats.stats.items():
        for label, (suffix, wanted) in COUNTED.items():
            if name == wanted and file.endswith(suffix):
                counts[label] += primitive / steps
    return counts


async def _profiled_run(bus: Bus, dag: Dag, mode: str) -> tuple[float, float, str]:
    """Run once under a profiler: wall s, process CPU s, the profiler's text."""
    cpu0, wall0 = time.process_time(), time.perf_counter()
    if mode == "pyinstrument":
        from pyinstrument import Profiler

        sampler = Profiler(interval=0.0005, async_mode="disabled")
        sampler.start()
        await run_goal(bus, scripted.goal_of(dag))
        sampler.stop()
        text = sampler.output_text(show_all=False, short_mode=False)
        flat = sampler.output_text(flat=True, flat_time="self")
        text = "## pyinstrument, self time (top)\n" + "\n".join(flat.splitlines()[:45]) + \
            "\n\n## pyinstrument call tree\n" + text
    elif mode == "cprofile":
        profile = cProfile.Profile()
        profile.enable()
        await run_goal(bus, scripted.goal_of(dag))
        profile.disable()
        counts = "".join(f"{n:>8.1f}  {label}\n"
                         for label, n in per_step_counts(profile, len(dag)).items())
        text = ("## cProfile: calls per step\n" + counts
                + "\n## cProfile: plancast functions by cumulative time\n"
                + _stats_text(profile, "cumulative", 40, OURS)
                + "\n## cProfile: all functions by self time\n"
                + _stats_text(profile, "tottime", 40))
    else:
        await run_goal(bus, scripted.goal_of(dag))
        text = ""
    return time.perf_counter() - wall0, time.process_time() - cpu0, text


def _has_pyinstrument() -> bool:
    try:
        import pyinstrument  # noqa: F401
    except ImportError:
        return False
    return True


async def run_profile(nats_url: str, config: BenchConfig, out_dir: Path,
                      progress: Callable[[str], None]) -> dict[str, Any]:
    """Profile each workload (planner, executor, synthesizer in this process)."""
    dags = [chain(config.chain), fan_out(config.fan), independent(config.independent)]
    instant = Latency(ttft=0.0, per_line=0.0)
    rules = [scripted.planner_rule(d, scripted.NOOP_ROLES, instant) for d in dags]
    rules.append(scripted.synthesizer_rule(0.0))
    modes = ["none", "cprofile", *(["pyinstrument"] if _has_pyinstrument() else [])]
    rows = []
    async with open_scripted_model_server(scripted.scenario(rules, 1.0)) as model:
        team = scripted.team(model.base_url, {"noop": ["echo", "sleep"]}, concurrency=1024)
        async with deployment(nats_url, team, builtin_tools(plugins=False)) as bus:
            await run_goal(bus, scripted.goal_of(dags[0]))  # warm-up
            for dag in dags:
                sections: list[str] = []
                row: dict[str, Any] = {"workload": dag.name, "steps": len(dag)}
                # The unprofiled figure is the median of the repetitions (CPU time is
                # steadier than wall time on a shared machine, but not noise-free).
                plain = [await _profiled_run(bus, dag, "none")
                         for _ in range(config.reps_for(len(dag)))]
                wall = statistics.median(w for w, _, _ in plain)
                cpu = statistics.median(c for _, c, _ in plain)
                for mode in modes[1:] if len(dag) < 500 else []:  # the wide one: figures only
                    sections.append((await _profiled_run(bus, dag, mode))[2])
                row |= {"wall_s": wall, "cpu_s": cpu, "cpu_per_step_us": cpu / len(dag) * 1e6,
                        "wall_per_step_us": wall / len(dag) * 1e6}
                row["file"] = ""
                if sections:
                    path = out_dir / f"profile-{dag.name}.txt"
                    header = (f"# profile of {dag.name} ({len(dag)} no-op steps): planner, "
                              f"executor and synthesizer in one process\n# unprofiled runs "
                              f"(median of {len(plain)}): wall {wall:.3f} s, process CPU "
                              f"{cpu:.3f} s ({row['cpu_per_step_us']:.0f} us/step)\n")
                    path.write_text(header + "\n\n".join(t for t in sections if t))
                    row["file"] = path.name
                rows.append(row)
                progress(f"profile: {dag.name}: {row['cpu_per_step_us']:.0f} µs CPU/step")
    return {"profilers": modes[1:], "rows": rows}
