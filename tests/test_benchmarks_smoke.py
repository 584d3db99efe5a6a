"""The benchmark command runs end to end on a tiny size and writes well-formed results."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.config import BenchConfig
from benchmarks.dag import Dag, Node
from benchmarks.floor import MODES, run_floor
from benchmarks.floor import deployment as floor_deployment
from benchmarks.floor_concurrent import deployment
from benchmarks.shapes import all_shapes
from benchmarks.suite_peers import compare
from benchmarks.workloads import chain, fan_out

ROOT = Path(__file__).resolve().parents[1]


def test_quick_benchmark_writes_results(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--no-peers", "--quiet",
         "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=100, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert {"date", "plancast_version", "machine", "seed", "config", "suites",
            "duration_s"} <= results.keys()
    assert {"cores", "python", "nats_server"} <= results["machine"].keys()
    after_idle = results["machine"]["after_idle"]
    assert set(after_idle) == {"work_hot_us", "work_after_idle_us", "round_trip_hot_us",
                               "round_trip_after_idle_us"}
    assert all(value > 0 for value in after_idle.values())
    assert "right after a 50 ms sleep" in (tmp_path / "results.md").read_text()
    assert set(results["suites"]) == {"shapes", "overhead", "concurrent", "profile"}
    for row in results["suites"]["shapes"]["rows"]:
        assert {"shape", "makespan_s", "bound_s", "makespan_over_bound", "non_streaming_s",
                "react_s", "speedup_vs_react", "ready_to_start_p50_ms",
                "ready_to_start_p99_ms"} <= row.keys()
        assert row["makespan_s"] > 0 and row["bound_s"] > 0
    for row in results["suites"]["overhead"]["rows"]:
        assert {"workload", "steps", "wall_s", "per_step_overhead_us", "steps_per_s"} <= row.keys()
    config = results["config"]
    for row in results["suites"]["overhead"]["rows"]:
        # CPU from the planner's and the executor's worker processes, summed over enough
        # runs to stand above the clock tick (or over the most runs allowed)
        assert row["planner_cpu_us"] > 0 and row["executor_cpu_us"] > 0
        assert row["reps"] <= row["cpu_runs"] <= config["cpu_max_runs"]
        assert (min(row["planner_cpu_s"], row["executor_cpu_s"]) >= config["cpu_min_s"]
                or row["cpu_runs"] == config["cpu_max_runs"])
        steps = row["steps"] * row["cpu_runs"]
        assert row["planner_cpu_us"] == pytest.approx(row["planner_cpu_s"] / steps * 1e6)
        assert row["executor_cpu_us"] == pytest.approx(row["executor_cpu_s"] / steps * 1e6)
        assert 0 < row["cpu_resolution_us"] < row["planner_cpu_us"]
        # messages stored per step, from the streams' counters: at least its task and its
        # result's share, and the records of its finished attempt (two)
        assert row["stored_tasks"] >= 1 and row["stored_outcomes"] > 0
        assert row["stored_finished"] == 2
        assert row["stored_total"] == pytest.approx(sum(
            row[f"stored_{k}"] for k in ("tasks", "outcomes", "events", "fences", "finished",
                                         "state", "objects", "errors")))
    suite = results["suites"]["concurrent"]
    concurrent = suite["rows"]
    assert [(r["planners"], r["load"] > 0) for r in concurrent] == [(1, False), (2, False),
                                                                    (1, True)]
    runs = config["concurrent_runs"]
    for row in concurrent:
        assert row["steps_per_s"] > 0 and row["planner_cpu_us"] > 0
        # each run counted once, on the planner its RunStarted names
        shares = [int(n) for n in row["runs_per_planner"].split("/")]
        assert len(shares) == row["planners"] and sum(shares) == runs
        assert row["split_even"] == (max(shares) <= 0.6 * runs if row["planners"] > 1
                                     else None)
        assert {"cpu_planner_s", "cpu_executor_s", "cpu_nats_s", "cpu_bench_s"} <= row.keys()
        # per run at least its tasks (each step's and the synthesis), a result, its fence
        # and two records of each step's finished attempt; the counting's calls at least
        kinds = row["stored_kinds_per_run"]
        assert kinds["tasks"] == row["steps_per_run"] + 1 and kinds["fences"] == 1
        assert kinds["finished"] == 2 * row["steps_per_run"] and kinds["outcomes"] >= 1
        assert row["stored_per_run"] == pytest.approx(sum(kinds.values()))
        assert row["api_per_run"] > 0
    assert concurrent[2]["cpu_load_s"] > 0  # the busy loops ran beside the loaded burst
    floor = suite["floor"]
    assert floor["runs"] == runs and floor["steps_per_s"] > 0
    assert {"cpu_planner_s", "cpu_executor_s", "cpu_nats_s"} <= floor.keys()
    assert suite["loaded_over_quiet"] > 0 and suite["plancast_over_floor"] > 0
    for row in results["suites"]["profile"]["rows"]:
        assert row["cpu_per_step_us"] > 0
        if row["file"]:  # the 1,000-step workload has figures only
            assert (tmp_path / row["file"]).read_text().startswith("# profile of")
    markdown = (tmp_path / "results.md").read_text()
    assert "## DAG shapes" in markdown and "## Runtime overhead" in markdown
    assert "## Concurrent runs" in markdown and "### Stored messages per step" in markdown
    for column in ("runs per planner", "split within 60/40", "nats-server CPU s",
                   "executor CPU s", "busy loops CPU s"):
        assert column in markdown
    assert "| bus alone (stored) |" in markdown and "loaded ÷ quiet" in markdown
    assert "executor CPU µs/step" in markdown and "planner + synthesizer in one worker" in markdown
    assert "all roles in one process" in markdown  # the profile's CPU includes the executors


def test_bound_is_planned_time_plus_longest_path() -> None:
    dag = Dag("t", (Node(1, "search", (), 1.0), Node(2, "search", (), 3.0),
                    Node(3, "math", (1, 2), 0.5)))
    assert dag.critical_path() == 3.5
    assert dag.bound({1: 0.0, 2: 0.0, 3: 0.0}) == 3.5
    assert dag.bound({1: 0.0, 2: 1.0, 3: 2.0}) == 4.5  # step 2 planned late
    assert dag.bound({1: 0.0, 2: 0.0, 3: 9.0}, plan_end=9.0) == 9.5


def test_tool_times_are_drawn_up_front_and_reproducible() -> None:
    first, again = all_shapes(BenchConfig(seed=7)), all_shapes(BenchConfig(seed=7))
    assert first == again
    assert all_shapes(BenchConfig(seed=8)) != first


@pytest.mark.anyio
async def test_the_bus_alone_runs_each_dag_in_dependency_order(nats_url: str) -> None:
    dags = [chain(4, 0.02), fan_out(6, 0.02)]
    floor = await run_floor(nats_url, dags, BenchConfig.quick_config(reps=2), lambda _: None)
    assert set(floor) == set(MODES)
    for rows in floor.values():
        assert [r["workload"] for r in rows] == [d.name for d in dags]
        for row in rows:  # a step sent before its dependencies were done would beat the bound
            assert row["reps"] == 2 and row["wall_over_bound"] >= 1.0
    plancast = [{"workload": d.name, "wall_s": 1.0, "wall_over_bound": 2.0} for d in dags]
    entry = compare(plancast, {}, floor)[1]
    assert entry["floor_grouped_over_bound"] == floor["grouped"][1]["wall_over_bound"]


@pytest.mark.anyio
async def test_the_recorded_floor_writes_each_steps_claim_then_its_result_over_it(
        nats_url: str) -> None:
    """``recorded`` does the executor's record writes too: per step a claim, then the
    result over it (expecting the claim last), the stream keeping the last of each."""
    dag = fan_out(4, 0.01)
    async with floor_deployment(nats_url, "rfloortest") as coordinator:
        await coordinator.run("recorded", dag)
        info = await coordinator.js.stream_info("rfloortestF")
        last = await coordinator.js.get_last_msg("rfloortestF", "rfloortestF.1.1")
    assert info.state.messages == len(dag) and info.state.last_seq == 2 * len(dag)
    assert last.data == b"result"


@pytest.mark.anyio
async def test_the_concurrent_floor_stores_each_steps_task_result_and_event(
        nats_url: str) -> None:
    """The bus alone at the concurrent load does at least plancast's per-step bus work:
    every task stored in the work queue and acknowledged (the work queue ends empty), one
    stored event per step, each run's results stored."""
    runs, width = 5, 3
    steps = runs * (width + 2)
    async with deployment(nats_url, "cfloortest", width) as floor:
        assert await floor.burst(runs) > 0
        stored = await floor.stored()
    assert stored["tasks_sent"] == steps and stored["tasks_held"] == 0  # stored, then acked
    assert stored["events"] == steps
    assert runs * 3 <= stored["results"] <= steps  # a run's steps of one moment share one
