"""The chaos judge on hand-made runs: it must be able to say wrong, lost, hung and twice."""

from __future__ import annotations

from pathlib import Path

import msgspec

from protocols import (
    RunEvent,
    RunFinished,
    RunResumed,
    RunStarted,
    Step,
    StepDispatched,
    StepFinished,
    StepPlanned,
)

from .faults import Fault
from .ledger import LEDGER, ledger_output, read_ledger, redelivered, repeated
from .observe import StoredLog, Tracked
from .report import Timeline, judge, silences
from .workload import ANSWER, make_runs, scenario

SPEC = make_runs(seed=3, count=1, path_seconds=4.0)[0]


def log_of(*events: RunEvent, at: float = 100.0) -> StoredLog:
    return StoredLog([msgspec.structs.replace(e, seq=i, ts=at + i)
                      for i, e in enumerate(events, start=1)])


def whole_run(outputs: dict[int, str] | None = None, answer: str = ANSWER) -> StoredLog:
    """SPEC's first round run to the end, each step finishing with ``outputs`` or the
    expected output."""
    run_id, events = SPEC.run_id, list[RunEvent]()
    events.append(RunStarted(run_id=run_id, goal=SPEC.goal))
    for line in SPEC.plan:
        step = msgspec.convert(line, Step)
        deps = sorted({*step.depends_on, *(int(a[1:]) for a in _refs(line))})
        events.append(StepPlanned(run_id=run_id, round=0,
                                  step=msgspec.structs.replace(step, depends_on=deps)))
    for line in SPEC.plan:
        sid = line["id"]
        output = (outputs or {}).get(sid, SPEC.expected[sid])
        events += [StepDispatched(run_id=run_id, step_id=sid, role="worker", attempt=1),
                   StepFinished(run_id=run_id, step_id=sid, attempt=1, output=output)]
    events.append(RunFinished(run_id=run_id, answer=answer))
    return log_of(*events)


def _refs(line: dict[str, object]) -> list[str]:
    args = line["args"]
    assert isinstance(args, dict)
    found = args.get("inputs") or str(args.get("text", "")).split("+")
    return [r for r in found if isinstance(r, str) and r.startswith("$")]


def accepted() -> Tracked:
    return Tracked(SPEC, submitted=1.0, accepted=1.0)


def test_a_correct_run_is_correct() -> None:
    verdict = judge(accepted(), whole_run())
    assert verdict.correct, verdict


def test_a_wrong_output_and_a_wrong_answer_are_caught() -> None:
    verdict = judge(accepted(), whole_run({1: "r0s0()"}, answer="nonsense"))
    assert verdict.status == "finished" and not verdict.correct
    assert any("step 1" in w for w in verdict.wrong) and any("answer" in w for w in verdict.wrong)


def test_a_finished_run_missing_a_step_lost_it() -> None:
    log = whole_run()
    last = SPEC.plan[-1]["id"]
    kept = [e for e in log.events if getattr(e, "step_id", None) != last]
    verdict = judge(accepted(), log_of(*kept))
    assert verdict.lost == [last] and verdict.violations


def test_a_run_without_its_end_is_hung() -> None:
    verdict = judge(accepted(), log_of(*whole_run().events[:-1]))
    assert verdict.status == "hung" and verdict.violations == []


def test_a_run_resumed_after_its_end_ended_but_broke_a_rule() -> None:
    log = whole_run()
    resumed = RunResumed(run_id=SPEC.run_id, planner="p/2", previous="p/1")
    verdict = judge(accepted(), log_of(*log.events, resumed))
    assert verdict.status == "finished" and not verdict.correct
    assert any("[terminal] events after the terminal event" in v for v in verdict.violations)


def test_a_run_never_accepted_is_refused() -> None:
    verdict = judge(Tracked(SPEC, submitted=1.0, submit_errors=["no planner"]), StoredLog([]))
    assert verdict.status == "refused" and "no planner" in verdict.reason


def test_silence_is_the_longest_gap_across_the_fault() -> None:
    fault = Fault("node_kill", "n1", start=105.0, seconds=2.0, end=108.0)
    runs = [Timeline("a", [100, 104, 111, 112], ended=True),  # gap 104..111 spans it: 7 s
            Timeline("b", [100, 101], ended=True),  # over before the fault
            Timeline("c", [100, 103], ended=False)]  # hung: not counted
    found = silences([fault], runs, until=200.0)
    assert found["node_kill"].count == 1 and found["node_kill"].max == 7.0


def test_the_ledger_tells_a_repeat_from_a_redelivery(tmp_path: Path) -> None:
    (tmp_path / LEDGER).write_text("r/1/1/1 w/a 10 5\nr/1/1/2 w/b 11 5\nr/2/1/1 w/a 10 6\n"
                                   "r/2/1/1 w/b 11 6\nr/3/1/1 w/a 10 8\nr/3/1/1 w/b 11 9\n")
    executions = read_ledger(tmp_path)
    assert repeated(executions) == {("r", 2, 1, 6, 1): 2}  # one delivery of task 6, twice
    assert redelivered(executions) == {("r", 1, 1): 2, ("r", 2, 1): 2, ("r", 3, 1): 2}


def test_workloads_are_seeded_and_their_outputs_follow_the_tool() -> None:
    again = make_runs(seed=3, count=1, path_seconds=4.0)[0]
    assert again == SPEC
    first = SPEC.plan[0]
    assert SPEC.expected[1] == ledger_output(first["args"]["tag"], [])
    n = len(SPEC.plan)
    assert {sid + n: out for sid, out in SPEC.expected.items() if sid <= n} == \
        {sid: out for sid, out in SPEC.expected.items() if sid > n}
    rules = scenario([SPEC]).rules
    assert [r.contains for r in rules[:2]] == ["A new plan is needed because", SPEC.marker]
