"""A short seeded chaos run in the normal suite: 40 runs through two faults of each kind.

It asserts what must hold whatever fails: no run hangs, no answer is wrong, no event log
breaks a rule, no delivery is executed twice, no attempt is executed again once it had
finished (its result recorded), every execution of an attempt saw the same idempotency
key (where the runtime gives one), and, with every process its own NATS user
(the default), no node refuses any of them anything. ``pytest -s`` prints the report. The long
version is ``python -m tests.chaos`` (and ``pytest -m chaos`` runs a middle one).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .driver import ChaosConfig, run_chaos
from .report import Report, render, to_json

pytestmark = pytest.mark.anyio


async def _chaos(tmp_path: Path, **options: object) -> Report:
    config = ChaosConfig(work_dir=tmp_path, log=lambda line: print(line, flush=True),
                         **options)  # type: ignore[arg-type]
    report = await run_chaos(config)
    print(render(report))
    (tmp_path / "report.json").write_text(json.dumps(to_json(report), indent=2, default=str))
    return report


def _check(report: Report) -> None:
    assert not report.of("hung"), render(report)
    assert not [r for r in report.runs if r.wrong], render(report)
    assert not [r for r in report.runs if r.violations], render(report)
    assert not report.duplicates, render(report)
    assert not report.repeats.of_finished, render(report)  # (a): a finished attempt again
    assert not report.repeats.keys_differ, render(report)
    assert not report.of("refused"), render(report)
    assert not report.failed_submissions, render(report)
    assert report.config["users"], "the chaos suite runs with per-role users"
    assert not report.permission_violations, render(report)


# nats-py leaves a StreamWriter of a reconnect attempt through the partition unclosed; its
# __del__ warns once the loop is gone. That is the client library's leak, not a run's
# outcome (reported to the runtime; remove this once the connection closes it).
STREAM_WRITER_LEAK = ("ignore:Exception ignored in. <function StreamWriter.__del__"
                      ":pytest.PytestUnraisableExceptionWarning")


@pytest.mark.timeout(480)
@pytest.mark.filterwarnings(STREAM_WRITER_LEAK)
async def test_short_chaos_run(tmp_path: Path) -> None:
    report = await _chaos(tmp_path, runs=40, faults_per_kind=2, seed=7, in_flight=10,
                          settle=90.0)
    _check(report)


@pytest.mark.chaos
@pytest.mark.timeout(1800)
@pytest.mark.filterwarnings(STREAM_WRITER_LEAK)
async def test_longer_chaos_run(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if "chaos" not in (request.config.getoption("-m") or ""):
        pytest.skip("the longer chaos run goes with `pytest -m chaos`")
    report = await _chaos(tmp_path, runs=60, faults_per_kind=8, seed=11)
    _check(report)
