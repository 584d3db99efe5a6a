"""The terminal view folds a run's events into a table of its steps."""

from __future__ import annotations

import re

from rich.console import Console

from protocols import (
    CriticVerdict,
    OutcomeRefused,
    PlanRejected,
    ReplanStarted,
    RunFinished,
    RunResumed,
    RunStarted,
    Step,
    StepDispatched,
    StepFailed,
    StepFinished,
    StepPlanned,
    StepReviewing,
    StepStarted,
    WorkFailed,
)
from runtime.cli import RunView

HOSTILE = ("[/x]", "[bold]", "[link=https://e.com]x[/link]", "[/INST]", "[timeouts]")
"""Text a model or a user may well write, which rich would read as markup (and ``[/x]`` as
an error that took the whole view down)."""


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


def shown(view: RunView, width: int) -> str:
    """What a terminal ``width`` columns wide shows of the view."""
    console = Console(width=width, record=True)
    console.print(view.render(width))
    return console.export_text()


def hostile_run() -> RunView:
    """A run whose goal, step titles, outputs, errors, critique and notes hold markup."""
    view = RunView("run-0123456789ab")
    steps = [Step(id=1, role="researcher", title="[/INST] look up the population of Germany",
                  tool="echo", args={"text": "x"}),
             Step(id=2, role="researcher", title="[bold] France", tool="echo",
                  args={"text": "x"}),
             Step(id=3, role="coder", title="chart [/x]", instruction="plot",
                  depends_on=[1, 2], review=True)]
    events = [RunStarted(run_id=view.run_id, seq=1, goal="compare " + " ".join(HOSTILE)),
              PlanRejected(run_id=view.run_id, seq=2, round=0, retrying=True,
                           error="step 1: unknown tool '[/x]' " + " ".join(HOSTILE))]
    events += [StepPlanned(run_id=view.run_id, seq=3 + i, round=0, step=s)
               for i, s in enumerate(steps)]
    events += [
        StepDispatched(run_id=view.run_id, seq=6, step_id=1, role="researcher", attempt=1),
        StepStarted(run_id=view.run_id, seq=7, step_id=1, attempt=1, executor="researcher/a"),
        StepFinished(run_id=view.run_id, seq=8, step_id=1, attempt=1, output="[/x] [bold]"),
        StepFailed(run_id=view.run_id, seq=9, step_id=2, attempt=1, will_retry=False,
                   error="[timeouts] step"),
        StepReviewing(run_id=view.run_id, seq=10, step_id=3, attempt=1),
        CriticVerdict(run_id=view.run_id, seq=11, step_id=3, attempt=1, approved=True,
                      critique="[link=https://e.com]x[/link]"),
        ReplanStarted(run_id=view.run_id, seq=12, round=1, source="step",
                      reason="under [models.local] [/INST]"),
    ]
    for event in events:
        view.apply(event)
    return view


def test_text_from_the_run_is_shown_as_written_never_as_markup() -> None:
    """Goal, titles, outputs, errors, critique and notes holding ``[/x]``, ``[bold]``,
    ``[link=…]``: rendered (no MarkupError) and shown character for character."""
    view = hostile_run()
    for width in (80, 120, 200):
        text = shown(view, width)
        flat = " ".join(text.split())  # the goal and the notes wrap
        for line in ("compare " + " ".join(HOSTILE),
                     "plan rejected: step 1: unknown tool '[/x]' " + " ".join(HOSTILE),
                     "replan 1 (step): under [models.local] [/INST]"):
            assert line in flat, (width, line, text)
        cells = ["[/INST] look", "[bold] France", "chart [/x]", "[/x] [bold]",
                 "[timeouts] step"]
        if width >= 200:  # narrower, the critique is cut to its column, with a …
            cells.append("critic: [link=https://e.com]x[/link]")
        for cell in cells:
            assert cell in text, (width, cell, text)


def test_the_table_fits_80_columns_with_whole_numbers_states_and_headers() -> None:
    """At 80 columns: every line fits; the ``#`` and state columns and every header are
    whole (not ``st…``); deps and the critic's mark join the step and state columns."""
    text = shown(hostile_run(), 80)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80, text
    assert re.search(r"┃ # ┃ role +┃ step +┃ state +┃ took +┃ output +┃", text), text
    for number, state in (("1", "done"), ("2", "failed"), ("3", "reviewing ✓")):
        assert any(re.match(rf"│ {number} │.*│ {state} +│", line) for line in lines), text
    assert "←1,2" in text


def test_the_table_at_120_columns_has_every_column() -> None:
    text = shown(hostile_run(), 120)
    assert max(len(line) for line in text.splitlines()) <= 120, text
    assert re.search(r"┃ # ┃ role +┃ deps ┃ step +┃ state +┃ critic +┃ took +┃ output +┃",
                     text), text
    assert re.search(r"│ 3 │ coder +│ 1,2 +│ └ chart \[/x\] +│ reviewing +│ ✓ approved │",
                     text), text


def test_a_long_note_wraps_and_a_long_output_ends_in_an_ellipsis() -> None:
    """Nothing is cut where the terminal has room: a note wraps (at most three lines, then
    …), an output fills its column and ends in a visible …."""
    view = RunView("r")
    words = " ".join(f"word{i}" for i in range(100))
    for event in [RunStarted(run_id="r", seq=1, goal="g"),
                  StepPlanned(run_id="r", seq=2, round=0,
                              step=Step(id=1, role="w", tool="echo", args={"text": "x"})),
                  StepFinished(run_id="r", seq=3, step_id=1, attempt=1, output=words),
                  WorkFailed(run_id="r", seq=4, work="synthesis", actor="s/x",
                             error=words, will_retry=True)]:
        view.apply(event)
    for width in (80, 160):
        lines = shown(view, width).splitlines()
        note = next(i for i, line in enumerate(lines) if line.startswith("synthesis failed"))
        assert len(" ".join(lines[note:note + 3])) > 2 * width - 20  # wraps, not clipped
        assert lines[note + 2].endswith("…") and "word99" not in lines[note + 2]
        row = next(line for line in lines if line.startswith("│ 1 "))
        assert len(row) > width - 4 and row.rstrip(" │").endswith("…")
