"""A live terminal view of a run, built from its events alone (so it works for any run)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.text import Text

from protocols import (
    CriticVerdict,
    OutcomeRefused,
    PlanApproved,
    PlanAwaitingApproval,
    PlanRejected,
    ReplanStarted,
    RunEvent,
    RunFailed,
    RunFinished,
    RunResumed,
    RunStarted,
    StepApproved,
    StepAwaitingApproval,
    StepDispatched,
    StepFailed,
    StepFinished,
    StepPlanned,
    StepReviewing,
    StepStarted,
    Usage,
    UsageRecorded,
    WorkFailed,
)

from .fit import Column, fitted_table

_STYLE = {"planned": "dim", "dispatched": "yellow", "running": "cyan", "done": "green",
          "failed": "red", "retrying": "magenta", "reviewing": "blue"}


@dataclass
class _Row:
    title: str
    role: str
    deps: str
    state: str = "planned"
    attempt: int = 1
    executor: str = ""
    started: float | None = None
    took: float | None = None
    note: str = ""
    verdict: str = ""
    depth: int = 0
    child: str = ""
    """The sub-team run doing this step's current attempt (a ``team`` role's step)."""


@dataclass
class RunView:
    """Folds events into a table of steps; ``render()`` gives the current picture."""

    run_id: str
    goal: str = ""
    rows: dict[int, _Row] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    outcome: RunFinished | RunFailed | None = None
    children: dict[str, RunView] = field(default_factory=dict)
    """Views of the sub-team runs under this run's steps, by run id."""

    def apply_tree(self, run_id: str, event: RunEvent) -> None:
        """Fold an event of this run or of a sub-team run under it (``runtime.client.tree``)."""
        view = self.find(run_id)
        if view is not None:
            view.apply(event)

    def find(self, run_id: str) -> RunView | None:
        """The view of this run or of a run under it."""
        if run_id == self.run_id:
            return self
        for child in self.children.values():
            if (found := child.find(run_id)) is not None:
                return found
        return None

    def progress(self) -> str:
        """One line on where the run stands, for its parent step's row."""
        if self.outcome is not None:
            return "finished" if isinstance(self.outcome, RunFinished) else "failed"
        done = sum(r.state == "done" for r in self.rows.values())
        return f"{done}/{len(self.rows)} steps done"

    def apply(self, event: RunEvent) -> None:
        match event:
            case RunStarted():
                self.goal = event.goal
            case StepPlanned():
                s = event.step
                depth = max((self.rows[d].depth + 1 for d in s.depends_on if d in self.rows),
                            default=0)
                title = _one_line(s.title or s.tool or "") or _one_line(s.instruction or "", 40)
                self.rows[s.id] = _Row(title, s.role, ",".join(map(str, s.depends_on)) or "-",
                                       depth=depth)
            case StepAwaitingApproval():
                row = self.rows[event.step_id]
                row.state, row.note = "awaiting approval", _one_line(event.reason)
            case StepApproved():
                self.rows[event.step_id].note = f"approved by {event.by}"
            case StepDispatched():
                row = self.rows[event.step_id]
                row.state, row.attempt = "dispatched", event.attempt
            case StepStarted():
                row = self.rows[event.step_id]
                row.state, row.executor, row.started = "running", event.executor, event.ts
                if event.child_run:
                    row.child = event.child_run
                    self.children.setdefault(event.child_run, RunView(event.child_run))
            case StepFinished():
                row = self.rows[event.step_id]
                row.state, row.note = "done", _one_line(event.output)
                row.took = event.duration or (event.ts - row.started if row.started else None)
            case StepFailed():
                row = self.rows[event.step_id]
                row.state = "retrying" if event.will_retry else "failed"
                row.note = _one_line(event.error)
            case StepReviewing():
                row = self.rows[event.step_id]
                row.state, row.verdict = "reviewing", ""
            case CriticVerdict():
                row = self.rows[event.step_id]
                row.verdict = "✓ approved" if event.approved else "✗ rejected"
                row.note = _one_line(f"critic: {event.critique}")
            case PlanRejected():
                self._note(f"plan rejected: {event.error}")
                # The planner drops the rejected plan's steps that were never dispatched.
                self.rows = {k: r for k, r in self.rows.items() if r.state != "planned"}
            case PlanAwaitingApproval():
                self._note(f"plan of round {event.round} awaits approval "
                           f"({event.reviewer}): plancast plan show {self.run_id}")
            case PlanApproved():
                edit = f", edited: {event.changes}" if event.edited else ""
                self._note(f"plan of round {event.round} approved by {event.by}{edit}")
                if event.edited:  # its steps are planned again, as edited
                    self.rows = {k: r for k, r in self.rows.items() if r.state != "planned"}
            case ReplanStarted():
                self._note(f"replan {event.round} ({event.source}): {event.reason}")
            case UsageRecorded():
                self.usage = event.total
            case RunResumed():
                self._note(f"taken over by {event.planner} (from {event.previous})")
            case WorkFailed():
                what = event.work + (f" {event.step_id}" if event.step_id else "")
                again = "retrying" if event.will_retry else "given up"
                self._note(f"{what} failed on {event.actor} ({again}): {event.error}")
            case OutcomeRefused():
                self._note(f"refused {event.kind} from {event.sender or '?'}: {event.reason}")
            case RunFinished() | RunFailed():
                self.outcome = event
                self.usage = event.usage

    def _note(self, text: str) -> None:
        """A line below the table (shown in full, up to NOTE_LINES terminal lines)."""
        self.notes.append(_one_line(text))

    def render(self, width: int = 120) -> RenderableType:
        """The run's goal, its table of steps and the latest notes, fitted to ``width``
        columns. Every string from the run is a ``Text``, never read as markup."""
        wide = width >= WIDE
        rows = [_cells(line, wide) for line in self._lines("", 0)]
        parts: list[RenderableType] = [
            Text(f"{self.run_id}: {_one_line(self.goal)}"),
            fitted_table(_COLUMNS[wide], rows, width)]
        parts += [_Clipped(Text(n, style="yellow", overflow="fold"), NOTE_LINES)
                  for n in self.notes[-3:]]
        parts.append(Text(usage_line(self.usage), style="dim"))
        return Group(*parts)

    def _lines(self, number: str, level: int) -> list[_Line]:
        """The table's rows: each step, and under a step done by a sub-team, its child run's
        steps, numbered ``step.child_step`` and indented one level more."""
        now, lines = time.time(), list[_Line]()
        for sid, row in sorted(self.rows.items()):
            took = row.took if row.took is not None else (
                now - row.started if row.started and row.state == "running" else None)
            state = row.state + (f" #{row.attempt}" if row.attempt > 1 else "")
            # The DAG's shape: each step indented below the deepest step it depends on.
            shape = ("  " * (row.depth - 1) + "└ " if row.depth else "") + row.title
            child = self.children.get(row.child)
            note = row.note or row.executor
            if child is not None and row.state == "running":
                note = f"sub-team {row.child}: {child.progress()}"
            lines.append(_Line(f"{number}{sid}", row.role, row.deps, "  " * level + shape,
                               state, _STYLE.get(row.state, ""), row.verdict,
                               f"{took:.2f}s" if took is not None else "", note))
            if child is not None:
                lines += child._lines(f"{number}{sid}.", level + 1)
        return lines


WIDE = 100
"""From this width on the table has a column each for a step's dependencies and the
critic's verdict; narrower, they join the step and state columns (80 columns fit)."""

NOTE_LINES = 3
"""Terminal lines a note below the table may take before it is cut (with a visible …)."""

NOTE_CHARS = 2000
"""What the view keeps of a step's output or error (the table shows what fits)."""


@dataclass
class _Line:
    """One row of the table, as text."""

    number: str
    role: str
    deps: str
    step: str
    state: str
    style: str
    verdict: str
    took: str
    note: str


_COLUMNS = {
    # The number and the state are never cut; the step wraps; its output is one line that
    # ends in a visible … where the terminal does.
    True: [Column("#"), Column("role", cap=14), Column("deps", cap=12), Column("step", share=2),
           Column("state"), Column("critic"), Column("took"),
           Column("output", share=3, overflow="ellipsis", no_wrap=True)],
    False: [Column("#"), Column("role", cap=12), Column("step", share=2), Column("state"),
            Column("took"), Column("output", share=3, overflow="ellipsis", no_wrap=True)],
}


def _cells(line: _Line, wide: bool) -> list[Text]:
    """A line's cells, for the wide or the narrow table."""
    state = Text(line.state, style=line.style)
    if wide:
        return [Text(line.number), Text(line.role), Text(line.deps), Text(line.step), state,
                Text(line.verdict), Text(line.took), Text(line.note)]
    step = Text(line.step)
    if line.deps != "-":
        step.append(f" ←{line.deps}", style="dim")
    if line.verdict:
        state.append(" " + line.verdict[:1])
    return [Text(line.number), Text(line.role), step, state, Text(line.took),
            Text(line.note)]


class _Clipped:
    """Text wrapped at the terminal's width to at most ``lines`` lines, the last ending in
    … if there was more (a long error stays readable without pushing the table away)."""

    def __init__(self, text: Text, lines: int) -> None:
        self.text, self.lines = text, lines

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        wrapped = list(self.text.wrap(console, options.max_width))
        if len(wrapped) > self.lines:
            wrapped = wrapped[: self.lines]
            wrapped[-1].rstrip()
            wrapped[-1].truncate(options.max_width - 1)
            wrapped[-1].append("…")
        yield Text("\n").join(wrapped)


def _one_line(text: str, limit: int = NOTE_CHARS) -> str:
    """``text`` on one line (whitespace runs made one space), at most ``limit`` long."""
    return _clip(" ".join(text.split()), limit)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def usage_line(usage: Usage) -> str:
    cost = f", ${usage.cost_usd:.4f}" if usage.cost_usd else ""
    estimated = " (partly estimated: the server reported none)" if usage.estimated else ""
    return (f"model calls: {usage.calls}, tokens: {usage.prompt_tokens} in / "
            f"{usage.completion_tokens} out{estimated}{cost}")
