"""``python -m benchmarks``: run the suites, write ``results.md`` and ``results.json``."""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from runtime.bus import open_embedded_server
from runtime.worker import backend_options

from . import report
from .config import SUITES, BenchConfig
from .floor import run_floor
from .stats import Progress
from .suite_concurrent import run_concurrent
from .suite_overhead import measure_plancast
from .suite_peers import compare, run_peers
from .suite_profile import run_profile
from .suite_shapes import run_shapes
from .workloads import workloads

RESULTS = Path(__file__).parent / "results"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="plancast benchmarks: DAG shapes, runtime overhead, concurrent runs, peers, "
                    "profile.")
    parser.add_argument("--suite", action="append", default=None,
                        help=f"suite(s) to run, repeatable or comma-separated: "
                             f"{', '.join(SUITES)} (default: all)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes, time scale 0.02, 1 repetition (seconds, for tests)")
    parser.add_argument("--time-scale", type=float, help="multiply scripted latencies "
                        "(default 0.1; --quick 0.02)")
    parser.add_argument("--reps", type=int, help="repetitions per measurement (default 3)")
    parser.add_argument("--seed", type=int, help="seed of the tool-time draws (default 2024)")
    parser.add_argument("--no-peers", action="store_true", help="skip LangGraph/AutoGen Core")
    parser.add_argument("--tool-effects", choices=("default", "none"),
                        help="effects the overhead and concurrent suites' tools declare "
                             "(default: default; "
                             "none: no records of finished attempts, docs/tools.md)")
    parser.add_argument("--out", type=Path, default=RESULTS,
                        help=f"directory for the results (default {RESULTS})")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return parser.parse_args(argv)


def build_config(args: argparse.Namespace) -> BenchConfig:
    suites = [s.strip() for arg in args.suite or [",".join(SUITES)] for s in arg.split(",")]
    unknown = sorted(set(suites) - set(SUITES))
    if unknown:
        raise SystemExit(f"unknown suite(s) {unknown}; choose from {', '.join(SUITES)}")
    if args.no_peers:
        suites = [s for s in suites if s != "peers"]
    overrides: dict[str, Any] = {"suites": tuple(dict.fromkeys(suites)),
                                 "peers": not args.no_peers}
    for name in ("time_scale", "reps", "seed", "tool_effects"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    return BenchConfig.quick_config(**overrides) if args.quick else BenchConfig(**overrides)


async def run_suites(config: BenchConfig, out_dir: Path, progress: Progress) -> dict[str, Any]:
    """Every selected suite against one nats-server started for the purpose."""
    suites: dict[str, Any] = {}
    selected = set(config.suites)
    async with open_embedded_server() as nats:
        if "shapes" in selected:
            suites["shapes"] = await run_shapes(nats.url, config, progress)
        if selected & {"overhead", "peers"}:
            noop = workloads(config)
            timed = workloads(config, config.step_seconds) if "peers" in selected else []
            rows = await measure_plancast(nats.url, [*noop, *timed], config, progress)
            if "overhead" in selected:
                suites["overhead"] = {"reps": config.reps, "rows": rows[:len(noop)],
                                      "tool_effects": config.tool_effects}
            if "peers" in selected:
                peers = await run_peers([*noop, *timed], config, progress)
                peers["floor"] = await run_floor(nats.url, timed, config, progress)
                peers["plancast_rows"] = rows
                peers["comparison"] = compare(rows, peers["peers"], peers["floor"])
                suites["peers"] = peers
        if "concurrent" in selected:
            suites["concurrent"] = await run_concurrent(nats.url, config, progress,
                                                         server_pid=nats.pid)
        if "profile" in selected:
            suites["profile"] = await run_profile(nats.url, config, out_dir, progress)
    return suites


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    config = build_config(args)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    progress = Progress(quiet=args.quiet)
    command = shlex.join(["python", "-m", "benchmarks", *(sys.argv[1:] if argv is None else argv)])
    results = report.header(config.seed, config.as_dict(), command)
    progress(f"suites {', '.join(config.suites)}; time scale {config.time_scale}, "
             f"{config.reps} rep(s); results in {args.out}")
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results["suites"] = anyio.run(run_suites, config, args.out, progress, backend="asyncio",
                                   backend_options=backend_options())
    results["duration_s"] = time.perf_counter() - started
    json_path, md_path = report.write(results, args.out)
    progress(f"done in {results['duration_s']:.0f} s: {md_path}, {json_path}")
    return 0
