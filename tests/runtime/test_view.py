"""The terminal view folds a run's events into a table of its steps."""

from __future__ import annotations

from rich.console import Console

from protocols import (
    OutcomeRefused,
    PlanRejected,
    RunFinished,
    RunResumed,
    RunStarted,
    Step,
    StepDispatched,
    StepFinished,
    StepPlanned,
    WorkFailed,
)
from runtime.cli import RunView


def planned(seq: int, step_id: int, depends_on: tuple[int, ...] = ()) -> StepPlanned:
    step = Step(id=step_id, role="worker", tool="echo", args={"text": "x"},
                depends_on=list(depends_on))
    return StepPlanned(run_id="r", seq=seq, round=0, step=step)


def test_a_rejected_plans_undispatched_steps_leave_the_table() -> None:
    """The planner drops them (only dispatched steps outlive a rejection); so does the view."""
    view = RunView("r")
    for event in [
        RunStarted(run_id="r", seq=1, goal="g"),
        planned(2, 1),
        StepDispatched(run_id="r", seq=3, step_id=1, role="worker", attempt=1),
        planned(4, 2, depends_on=(7,)),
        PlanRejected(run_id="r", seq=5, round=0, error="step 2 depends on 7", retrying=True),
        planned(6, 3),
        StepFinished(run_id="r", seq=7, step_id=1, attempt=1, output="x"),
        RunFinished(run_id="r", seq=8, answer="done"),
    ]:
        view.apply(event)
    assert sorted(view.rows) == [1, 3]
    assert view.rows[1].state == "done" and view.rows[3].state == "planned"
    assert view.notes == ["plan rejected: step 2 depends on 7"]
    assert isinstance(view.outcome, RunFinished)
    console = Console(width=120, record=True)
    console.print(view.render())
    assert "r: g" in console.export_text()


def test_takeovers_failed_work_and_refused_outcomes_show_as_notes() -> None:
    view = RunView("r")
    for event in [
        RunStarted(run_id="r", seq=1, goal="g"),
        RunResumed(run_id="r", seq=2, planner="planner/b", previous="planner/a"),
        WorkFailed(run_id="r", seq=3, work="synthesis", actor="synthesizer/x",
                   error="HTTP 500", will_retry=True),
        OutcomeRefused(run_id="r", seq=4, kind="step.result", step_id=1, attempt=1,
                       sender="js/forger", reason="never claimed"),
    ]:
        view.apply(event)
    assert view.notes == [
        "taken over by planner/b (from planner/a)",
        "synthesis failed on synthesizer/x (retrying): HTTP 500",
        "refused step.result from js/forger: never claimed",
    ]
