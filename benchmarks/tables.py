"""``results.md``: the results as Markdown tables, one section per suite."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

Column = tuple[str, str, int]
"""(title, key in the row, digits)."""

SHAPE_COLUMNS: list[Column] = [
    ("shape", "shape", 0), ("steps", "steps", 0), ("makespan s", "makespan_s", 3),
    ("bound s", "bound_s", 3), ("makespan ÷ bound", "makespan_over_bound", 3),
    ("ideal bound s", "ideal_bound_s", 3), ("non-streaming s", "non_streaming_s", 3),
    ("non-streaming ÷ streaming", "streaming_speedup", 2), ("ReAct s", "react_s", 3),
    ("speedup vs ReAct", "speedup_vs_react", 2),
    ("ready→start p50 ms", "ready_to_start_p50_ms", 1),
    ("ready→start p99 ms", "ready_to_start_p99_ms", 1),
]
WORKLOAD_COLUMNS: list[Column] = [
    ("workload", "workload", 0), ("steps", "steps", 0), ("reps", "reps", 0),
    ("p50 wall s", "wall_s", 3), ("bound s", "bound_s", 3),
    ("wall ÷ bound", "wall_over_bound", 2),
    ("per-step overhead µs", "per_step_overhead_us", 0), ("steps/s", "steps_per_s", 0),
]
PLANCAST_COLUMNS: list[Column] = [
    *WORKLOAD_COLUMNS, ("run fixed cost ms", "fixed_ms", 1),
    ("per-step in DAG µs", "per_step_in_dag_us", 0),
    ("CPU runs", "cpu_runs", 0), ("planner CPU µs/step", "planner_cpu_us", 0),
    ("executor CPU µs/step", "executor_cpu_us", 0),
]
STORED_COLUMNS: list[Column] = [
    ("workload", "workload", 0), ("stored msgs/step", "stored_total", 2),
    ("tasks", "stored_tasks", 2), ("claims + results", "stored_outcomes", 2),
    ("event msgs", "stored_events", 2), ("finished records", "stored_finished", 2),
    ("run-state writes", "stored_state", 2), ("objects", "stored_objects", 2),
    ("fences", "stored_fences", 2), ("JetStream API calls/step", "stored_api", 2),
]
PROFILE_COLUMNS: list[Column] = [
    ("workload", "workload", 0), ("steps", "steps", 0), ("wall s", "wall_s", 3),
    ("wall µs/step", "wall_per_step_us", 0), ("process CPU s", "cpu_s", 3),
    ("CPU µs/step", "cpu_per_step_us", 0), ("profile", "file", 0),
]


def fmt(value: Any, digits: int = 3) -> str:
    """A table cell: numbers rounded, missing values as an em dash."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def table(columns: Sequence[Column], rows: Sequence[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(title for title, _, _ in columns) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(columns))) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(fmt(row.get(k), d) for _, k, d in columns) + " |")
    return "\n".join(lines)


def _head(r: dict[str, Any]) -> list[str]:
    m = r["machine"]
    return [
        "# plancast benchmarks", "",
        f"- date: {r['date']}; plancast {r['plancast_version']}; seed {r['seed']}",
        f"- machine: {m['cores']} cores, {m['implementation']} {m['python']}, "
        f"{m['nats_server']}, {m['platform']}",
        *_after_idle(m.get("after_idle")),
        f"- command: `{r['command']}` ({fmt(r.get('duration_s'), 0)} s)",
        "- see benchmarks/README.md for what every number means", "",
    ]


def _after_idle(c: dict[str, float] | None) -> list[str]:
    """The machine's figures after idle (``benchmarks/machine.py``), if measured."""
    if not c:
        return []
    return [f"- right after a 50 ms sleep: a piece of Python {fmt(c['work_after_idle_us'], 0)} µs "
            f"(back to back {fmt(c['work_hot_us'], 0)} µs), a round trip to another process "
            f"{fmt(c['round_trip_after_idle_us'], 0)} µs (back to back "
            f"{fmt(c['round_trip_hot_us'], 0)} µs)"]


def _shapes(s: dict[str, Any]) -> list[str]:
    return [
        f"## DAG shapes (scripted latencies x {s['time_scale']:g}, p50 of {s['reps']})", "",
        table(SHAPE_COLUMNS, s["rows"]), "",
        "bound = max over steps of (StepPlanned - RunStarted + longest tool path from the "
        "step), not before PlanFinished, + the joiner's scripted latency. ideal bound: the "
        "same with the scripted emission times (no runtime cost at all).", "",
    ]


PLANCAST_NOTE = (
    "per-step overhead = (p50 wall - tool critical path - scripted model time, here 0) "
    "÷ steps; the scripted model answers at once. run fixed cost = RunStarted → first "
    "StepPlanned plus last StepFinished → RunFinished (planner and joiner calls, events); "
    "per-step in DAG = (first StepPlanned → last StepFinished - tool critical path) ÷ steps. "
    "planner / executor CPU = that worker process's CPU time (user + system, /proc) summed "
    "over the CPU runs ÷ their steps (the wall figures are the medians of the first `reps` "
    "of them; CPU runs beyond reps only lift the CPU above the 10 ms clock tick); the "
    "benchmark's own process (event follower, scripted model) is not counted.")


STORED_NOTE = (
    "Messages stored per step over the same CPU runs: each stream's message counter (its "
    "last sequence: it counts what a work queue or an interest stream removed since) after "
    "the runs minus before, ÷ their steps. tasks: PP_WORK (step tasks and each run's "
    "synthesis task); claims + results: PP_RESULTS (several in one `step.outcomes` message "
    "count once; each run's synthesis decision too); event msgs: PP_EVENTS without fences "
    "(several events of one moment in one `event.batch` count once); finished records: "
    "PP_FINISHED (an attempt's claim-first write and its result); run-state writes: the runs "
    "KV bucket (headers and step records); fences: run ownership. API calls: the account's "
    "JetStream API calls (pull requests, consumer creates and deletes, gets; the counting's "
    "own dozen included) ÷ steps: requests, not stored.")


def _overhead(o: dict[str, Any]) -> list[str]:
    lines = [
        "## Runtime overhead (no-op `echo` steps; planner + synthesizer in one worker "
        "process, executors in another)", "",
        table(PLANCAST_COLUMNS, o["rows"]), "",
        PLANCAST_NOTE, "",
    ]
    lines += _effects_said(o)
    if any("stored_total" in row for row in o["rows"]):
        lines += ["### Stored messages per step", "", table(STORED_COLUMNS, o["rows"]), "",
                  STORED_NOTE, ""]
    return lines


def _peers(p: dict[str, Any]) -> list[str]:
    lines = ["## Peers (same workloads; peers in-process, plancast over NATS)", ""]
    for name, why in p.get("unavailable", {}).items():
        lines += [f"- {name}: not run ({why})"]
    names = list(p.get("peers", {}))
    for name, peer in p.get("peers", {}).items():
        lines += [f"### {name} {peer['version']}", "", table(WORKLOAD_COLUMNS, peer["rows"]), ""]
    lines += ["### plancast (planner + synthesizer in one worker process, executors in "
              "another)", "", table(PLANCAST_COLUMNS, p["plancast_rows"]), "",
              PLANCAST_NOTE, ""]
    columns: list[Column] = [("workload", "workload", 0), ("plancast s", "plancast_s", 3)]
    for name in names:
        columns += [(f"{name} s", f"{name}_s", 3),
                    (f"plancast ÷ {name}", f"plancast_over_{name}", 2)]
    lines += ["### plancast ÷ peer (p50 wall time; below 1 plancast is faster)", "",
              table(columns, p["comparison"]), ""]
    timed = [r for r in p["comparison"] if r.get("plancast_over_bound")]
    if timed:
        bound: list[Column] = [("workload", "workload", 0),
                               ("plancast wall ÷ bound", "plancast_over_bound", 2)]
        bound += [(f"{n} wall ÷ bound", f"{n}_over_bound", 2) for n in names]
        floor = list(p.get("floor", {}))
        bound += [(f"bus alone, {m}", f"floor_{m}_over_bound", 2) for m in floor]
        lines += ["### wall ÷ bound, timed steps (same run)", "", table(bound, timed), ""]
        if floor:
            lines += [FLOOR_NOTE, ""]
    return lines


FLOOR_NOTE = (
    "bus alone (`benchmarks/floor.py`): the same DAG with no planning, events, state or "
    "model calls, this process sending each task as its dependencies finish and a child "
    "process running it; stored: every task a stored JetStream message, and the results "
    "of one moment one, as plancast sends them; recorded: stored, and each step's two "
    "records of its finished attempt written as plancast's executor writes them before it "
    "answers (a claim, then the result over it, each checked and awaited in turn); "
    "grouped: the tasks ready together as one stored message too; core: nothing stored. "
    "The floor under plancast's figures on this machine, not a runtime."
)


CONCURRENT_COLUMNS: list[Column] = [
    ("what", "what", 0), ("runs", "runs", 0), ("steps per run", "steps_per_run", 0),
    ("wall s", "wall_s", 3), ("steps/s", "steps_per_s", 0),
    ("runs per planner", "runs_per_planner", 0), ("split within 60/40", "split_even", 0),
    ("planner CPU µs/step", "planner_cpu_us", 0), ("planner CPU s", "cpu_planner_s", 3),
    ("executor CPU s", "cpu_executor_s", 3), ("nats-server CPU s", "cpu_nats_s", 3),
    ("stored msgs/run", "stored_per_run", 1), ("JetStream API calls/run", "api_per_run", 1),
    ("benchmark CPU s", "cpu_bench_s", 3), ("busy loops CPU s", "cpu_load_s", 3),
]


def _effects_said(suite: dict[str, Any]) -> list[str]:
    """A line saying the suite's tools declared another ``effects``, if they did."""
    effects = suite.get("tool_effects", "default")
    if effects == "default":
        return []
    return [f"(The tools `echo` and `sleep` declare `effects = \"{effects}\"` here: "
            "`--tool-effects`.)", ""]


def _yes_no(row: dict[str, Any]) -> dict[str, Any]:
    even = row.get("split_even")
    return {**row, "split_even": None if even is None else ("yes" if even else "no")}


def _concurrent(p: dict[str, Any]) -> list[str]:
    rows = [_yes_no(r) for r in p["rows"]]
    if p.get("floor"):
        rows.append(p["floor"])
    lines = [f"## Concurrent runs ({p['workload']} each, submitted at once)", "",
             table(CONCURRENT_COLUMNS, rows), ""]
    lines += _effects_said(p)
    if "loaded_over_quiet" in p:
        lines += [f"loaded ÷ quiet (1 planner): {fmt(p['loaded_over_quiet'], 2)}; bus alone "
                  f"÷ plancast (1 planner, quiet): {fmt(1 / p['plancast_over_floor'], 2)}.", ""]
    lines += [CONCURRENT_NOTE, ""]
    return lines


CONCURRENT_NOTE = (
    "plancast: every role in its own child process (executors in one, each planner with a "
    "synthesizer in its own); wall = first submit → last run finished; runs per planner = "
    "each run's `RunStarted.planner`, most first (the submit subject's queue group hands "
    "each submission to one planner at random); planner CPU µs/step = the planner "
    "processes' CPU time ÷ all steps. CPU s = each process's CPU time (user + system, /proc) "
    "over the measured burst: planner(s), executors, nats-server, and the benchmark's own "
    "process (submitting, following every run's events, the scripted model). stored "
    "msgs/run: messages the streams stored per run (tasks, claims and results, events, "
    "fences, records of finished attempts, run-state writes; as in the overhead suite's "
    "table); JetStream API calls/run: the account's (consumer creates and deletes, "
    "gets; the counting's own dozen included). The loaded "
    "row: the same burst with one CPU-bound child process per core (a busy loop, at the "
    "benchmark's priority) beside it, standing for a second benchmark using the machine. "
    "bus alone (`benchmarks/floor_concurrent.py`): the same runs at once with nothing but "
    "the messages plancast stores per step: each task a stored message in a work-queue "
    "stream, acknowledged by the executor; each run's results of one moment one stored "
    "message; one stored event message per step; a planner child process sends each run's "
    "tasks as their dependencies finish, an executor child process answers. No submission, "
    "run record, plan, synthesis, state or recovery: the floor, not a runtime.")


def _profile(p: dict[str, Any]) -> list[str]:
    return [f"## Profile ({', '.join(p['profilers'])}; all roles in one process)", "",
            table(PROFILE_COLUMNS, p["rows"]), "",
            "wall and CPU are from a run without a profiler; the profiles are of further "
            "runs of the same workload. process CPU is the benchmark's one process: planner, "
            "executors, synthesizer, event follower and scripted model together (the "
            "overhead suite's CPU columns are per worker process).", ""]


def markdown(results: dict[str, Any]) -> str:
    """The whole ``results.md``."""
    suites = results["suites"]
    lines = _head(results)
    for name, render in (("shapes", _shapes), ("overhead", _overhead),
                         ("concurrent", _concurrent), ("peers", _peers), ("profile", _profile)):
        if name in suites:
            lines += render(suites[name])
    return "\n".join(lines)
