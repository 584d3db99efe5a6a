"""A live terminal view of a run, built from its events alone (so it works for any run)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rich.console import Group, RenderableType
from rich.table import Table
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
                self.rows[s.id] = _Row(s.title or s.tool or (s.instruction or "")[:40], s.role,
                                       ",".join(map(str, s.depends_on)) or "-", depth=depth)
            case StepAwaitingApproval():
                row = self.rows[event.step_id]
                row.state, row.note = "awaiting approval", event.reason[:200]
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
                row.state, row.note = "done", event.output.replace("\n", " ")[:200]
                row.took = event.duration or (event.ts - row.started if row.started else None)
            case StepFailed():
                row = self.rows[event.step_id]
                row.state = "retrying" if event.will_retry else "failed"
                row.note = event.error[:200]
            case StepReviewing():
                row = self.rows[event.step_id]
                row.state, row.verdict = "reviewing", ""
            case CriticVerdict():
                row = self.rows[event.step_id]
                row.verdict = "✓ approved" if event.approved else "✗ rejected"
                row.note = f"critic: {event.critique[:200]}"
            case PlanRejected():
                self.notes.append(f"plan rejected: {event.error[:100]}")
                # The planner drops the rejected plan's steps that were never dispatched.
                self.rows = {k: r for k, r in self.rows.items() if r.state != "planned"}
            case PlanAwaitingApproval():
                self.notes.append(f"plan of round {event.round} awaits approval "
                                  f"({event.reviewer}): plancast plan show {self.run_id}")
            case PlanApproved():
                edit = f", edited: {event.changes[:100]}" if event.edited else ""
                self.notes.append(f"plan of round {event.round} approved by {event.by}{edit}")
                if event.edited:  # its steps are planned again, as edited
                    self.rows = {k: r for k, r in self.rows.items() if r.state != "planned"}
            case ReplanStarted():
                self.notes.append(f"replan {event.round} ({event.source}): {event.reason[:100]}")
            case UsageRecorded():
                self.usage = event.total
            case RunResumed():
                self.notes.append(f"taken over by {event.planner} (from {event.previous})")
            case WorkFailed():
                what = event.work + (f" {event.step_id}" if event.step_id else "")
                again = "retrying" if event.will_retry else "given up"
                self.notes.append(f"{what} failed on {event.actor} ({again}): "
                                  f"{event.error[:100]}")
            case OutcomeRefused():
                self.notes.append(f"refused {event.kind} from {event.sender or '?'}: "
                                  f"{event.reason[:100]}")
            case RunFinished() | RunFailed():
                self.outcome = event
                self.usage = event.usage

    def render(self, width: int = 120) -> RenderableType:
        """The table, fitted to ``width`` columns (the output column gets what is left)."""
        table = Table(title=f"{self.run_id}: {self.goal}", title_justify="left", expand=False)
        for col in ("#", "role", "deps", "step", "state", "critic", "took"):
            table.add_column(col, no_wrap=True, max_width=24)
        room = max(12, width - 92)
        table.add_column("output", no_wrap=True, max_width=room)
        for cells in self._lines(room, "", 0):
            table.add_row(*cells)
        parts: list[RenderableType] = [table]
        parts += [Text(n, style="yellow") for n in self.notes[-3:]]
        parts.append(Text(usage_line(self.usage), style="dim"))
        return Group(*parts)


    def _lines(self, room: int, number: str, level: int) -> list[list[RenderableType]]:
        """The table's rows: each step, and under a step done by a sub-team, its child run's
        steps, numbered ``step.child_step`` and indented one level more."""
        now, lines = time.time(), list[list[RenderableType]]()
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
            lines.append([f"{number}{sid}", row.role, row.deps, "  " * level + shape,
                          Text(state, style=_STYLE.get(row.state, "")), row.verdict,
                          f"{took:.2f}s" if took is not None else "", _clip(note, room)])
            if child is not None:
                lines += child._lines(room, f"{number}{sid}.", level + 1)
        return lines


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def usage_line(usage: Usage) -> str:
    cost = f", ${usage.cost_usd:.4f}" if usage.cost_usd else ""
    estimated = " (partly estimated: the server reported none)" if usage.estimated else ""
    return (f"model calls: {usage.calls}, tokens: {usage.prompt_tokens} in / "
            f"{usage.completion_tokens} out{estimated}{cost}")
