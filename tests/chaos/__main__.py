"""``python -m tests.chaos --runs 200 --faults-per-kind 50 --seed 1 [--json out.json]``.

The long chaos run, on demand (about 40 minutes at these numbers on two cores: node faults
take turns, each waiting for the cluster to recover from the last). It prints progress as
it goes, then the report. Exit status 1 if a run hung, an answer was wrong, a log broke a
rule, a delivery was executed twice, or a node refused a user something (a permission
violation). Every process connects as its own NATS user unless ``--no-users``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import anyio

from .driver import ChaosConfig, run_chaos
from .faults import KINDS, RECOVERY_WAIT
from .report import render, to_json


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--faults-per-kind", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--in-flight", type=int, default=10, help="most runs at once")
    parser.add_argument("--settle", type=float, default=180.0,
                        help="seconds the runs get to end after the last fault")
    parser.add_argument("--recovery-wait", type=float, default=RECOVERY_WAIT,
                        help="seconds a node fault waits at most for the cluster to be "
                             "healthy before the next node fault")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help=f"fault kinds, comma-separated (default: {','.join(KINDS)})")
    timeouts = parser.add_mutually_exclusive_group()
    timeouts.add_argument("--timeouts", dest="timeouts", action="store_true", default=None,
                          help="write [timeouts] into the team file (default: if supported)")
    timeouts.add_argument("--no-timeouts", dest="timeouts", action="store_false")
    parser.add_argument("--users", action=argparse.BooleanOptionalAction, default=True,
                        help="one NATS user per role, for the client and the observer, as "
                             "`plancast auth init` writes them (--no-users: none, to compare)")
    parser.add_argument("--work-dir", type=Path, help="logs, ledger, nats data (default: temp)")
    parser.add_argument("--json", type=Path, help="write the report here as JSON")
    args = parser.parse_args(argv)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    if unknown := set(kinds) - set(KINDS):
        parser.error(f"unknown fault kinds: {', '.join(sorted(unknown))}")
    config = ChaosConfig(
        runs=args.runs, faults_per_kind=args.faults_per_kind, seed=args.seed,
        in_flight=args.in_flight, settle=args.settle, kinds=kinds, timeouts=args.timeouts,
        recovery_wait=args.recovery_wait, users=args.users,
        work_dir=args.work_dir, log=lambda line: print(line, flush=True))
    report = anyio.run(run_chaos, config, backend="asyncio")
    print(render(report), flush=True)
    if args.json:
        args.json.write_text(json.dumps(to_json(report), indent=2, default=str))
        print(f"report written to {args.json}")
    return 1 if report.problems() else 0


if __name__ == "__main__":
    sys.exit(main())
