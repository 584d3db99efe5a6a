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

from .evidence import permission_violations
from .faults import Fault
from .ledger import LEDGER, classify, ledger_output, read_ledger, redelivered, repeated
from .observe import StoredLog, Submission, Tracked
from .records import server_time
from .report import (
    NO_FAULT,
    Report,
    Timeline,
    judge,
    ledger_figures,
    render,
    silences,
    submission_figures,
    to_json,
)
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


def test_submissions_are_counted_by_the_fault_they_were_made_during() -> None:
    faults = [Fault("partition", "n3+side", start=100.0, seconds=15.0, end=115.0),
              Fault("actor_kill", "planner-1", start=110.0, seconds=1.0, end=111.0)]
    run = Tracked(SPEC, submitted=101.0, accepted=125.0, submissions=[
        Submission(101.0, 111.0, "lost", "RunNotAccepted: no planner answered"),
        Submission(110.5, 120.5, "refused", "RunRefused: no response from stream"),
        Submission(124.0, 125.0, "accepted")])
    figures, failed = submission_figures(faults, [run], until=200.0)
    assert (figures["partition"].made, figures["partition"].lost,
            figures["partition"].refused) == (2, 1, 1)
    assert (figures["actor_kill"].made, figures["actor_kill"].refused) == (1, 1)
    assert (figures[NO_FAULT].made, figures[NO_FAULT].accepted) == (1, 1)
    assert len(failed) == 2 and "partition n3+side" in failed[1]
    report = Report(config={}, runs=[], duplicates={}, redeliveries=0, executions=0,
                    faults=faults, unavailable={}, silences={}, seconds=0.0, in_flight={},
                    members={}, submissions=figures, failed_submissions=failed)
    assert len([p for p in report.problems() if p.startswith("submission refused")]) == 2
    assert "  partition        2         0        1     1" in render(report)


def test_the_ledger_tells_a_repeat_from_a_redelivery(tmp_path: Path) -> None:
    (tmp_path / LEDGER).write_text("r/1/1/1 w/a 10 5\nr/1/1/2 w/b 11 5\nr/2/1/1 w/a 10 6\n"
                                   "r/2/1/1 w/b 11 6\nr/3/1/1 w/a 10 8\nr/3/1/1 w/b 11 9\n")
    executions = read_ledger(tmp_path)
    assert repeated(executions) == {("r", 2, 1, 6, 1): 2}  # one delivery of task 6, twice
    assert redelivered(executions) == {("r", 1, 1): 2, ("r", 2, 1): 2, ("r", 3, 1): 2}


def test_repeats_of_a_finished_attempt_are_told_from_repeats_of_an_interrupted_one(
    tmp_path: Path
) -> None:
    """r/1/1 ran again after its record (a); r/2/1 ran again while its first execution was
    stopped mid-step (b); r/3/1's first execution returned but died before its record, so
    its repeat is (b) too; r/4/1 ran once."""
    (tmp_path / LEDGER).write_text(
        "r/1/1/1 w/a 10 5 start 100.0 k1\nr/1/1/1 w/a 10 5 end 101.0 k1\n"
        "r/1/1/2 w/b 11 5 start 103.0 k1\nr/1/1/2 w/b 11 5 end 104.0 k1\n"
        "r/2/1/1 w/a 10 6 start 100.0 k2\nr/2/1/2 w/b 11 6 start 103.0 k2\n"
        "r/2/1/2 w/b 11 6 end 104.0 k2\nr/3/1/1 w/a 10 7 start 100.0 -\n"
        "r/3/1/1 w/a 10 7 end 101.0 -\nr/3/1/2 w/b 11 7 start 103.0 -\n"
        "r/4/1/1 w/b 11 8 start 100.0 k4\nr/4/1/1 w/b 11 8 end 100.5 k4\n")
    executions = read_ledger(tmp_path)
    assert [e.ended for e in executions if e.run_id == "r" and e.step_id == 2] == [None, 104.0]
    recorded = {("r", 1, 1): 101.2, ("r", 2, 1): 104.1, ("r", 4, 1): 100.6}
    _, redeliveries, repeats = ledger_figures(executions, recorded)
    assert redeliveries == 3
    assert list(repeats.of_finished) == ["r/1/1"]
    assert "w/b pid 11" in repeats.of_finished["r/1/1"][0]
    assert (repeats.of_interrupted, repeats.ended_unrecorded) == (2, 1)
    assert repeats.keys_checked == 2 and repeats.keys_differ == []
    strict = classify(executions, None)  # no records: a tool's return counts as finished
    assert sorted(strict.of_finished) == ["r/1/1", "r/3/1"] and strict.finished_from == "ledger"
    report = Report(config={}, runs=[], duplicates={}, redeliveries=redeliveries,
                    executions=len(executions), faults=[], unavailable={}, silences={},
                    seconds=0.0, in_flight={}, members={}, repeats=repeats)
    assert any(p.startswith("repeat of a finished attempt: r/1/1") for p in report.problems())
    assert "(a) repeats, finished attempt  1" in render(report)
    summary = to_json(report)["summary"]
    assert (summary["repeats_of_finished_attempts"],
            summary["repeats_of_interrupted_attempts"]) == (1, 2)


def test_executions_of_one_attempt_with_different_keys_are_a_problem(tmp_path: Path) -> None:
    (tmp_path / LEDGER).write_text("r/1/1/1 w/a 10 5 start 100.0 k1\n"
                                   "r/1/1/2 w/b 11 5 start 103.0 k2\n")
    repeats = classify(read_ledger(tmp_path), {})
    assert repeats.keys_differ == ["r/1/1"] and repeats.of_interrupted == 1
    report = Report(config={}, runs=[], duplicates={}, redeliveries=1, executions=2,
                    faults=[], unavailable={}, silences={}, seconds=0.0, in_flight={},
                    members={}, repeats=repeats)
    assert "idempotency keys differ: r/1/1" in report.problems()


def test_the_servers_time_stamps_are_read_to_the_microsecond() -> None:
    assert abs(server_time("2026-11-28T04:21:20.123456789Z") - 1795839680.123456) < 1e-6
    assert server_time("2026-11-28T04:21:20Z") == 1795839680.0


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


def test_a_users_refusal_is_a_violation_and_a_routes_refused_login_a_note(
        tmp_path: Path) -> None:
    """Seed 48: a node coming back after SIGKILL had two route connections refused their
    login; routes are the cluster's own, so they are noted, not counted against users."""
    (tmp_path / "n3").mkdir()
    log = tmp_path / "n3" / "nats-server.log"
    log.write_text(
        "[1] 2026/11/28 09:08:29.200598 [ERR] 10.0.0.1:43162 - rid:181 - authentication error\n"
        "[1] 2026/11/28 09:08:30.100000 [ERR] 10.0.0.9:5001 - cid:12 - authentication error\n"
        "[1] 2026/11/28 09:08:31.100000 [ERR] 10.0.0.9:5002 - cid:13 - \"v1.0\" - "
        "Publish Violation - User \"worker\", Subject \"p.event.r1\"\n")
    users = permission_violations([log])
    assert [line.split(" - ")[1] for line in users] == ["cid:12", "cid:13"]
    assert [line.split(" - ")[1] for line in permission_violations([log], routes=True)] \
        == ["rid:181"]
