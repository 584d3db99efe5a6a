"""The tables commands print: what a deployment is doing (``plancast status``, ``plancast
runs``), the roles installed, the plans kept and a plan awaiting approval."""

from __future__ import annotations

import time
from collections.abc import Iterable

import msgspec
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from protocols import PlanAwaitingApproval, SavedPlan

from ..actor import RoleEntry
from ..client import DeploymentStatus, RunStatus, parameters


def render_status(status: DeploymentStatus, console: Console, *, wait: float) -> None:
    """Print the two tables people read."""
    if status.actors:
        actors = Table(title=f"live actors ({len(status.actors)})")
        for column in ("role", "instance", "host", "pid", "in flight", "handled",
                       "last beat", "restarts", "draining"):
            actors.add_column(column)
        for a in status.actors:
            actors.add_row(
                a.role, a.instance, a.host, str(a.pid), ", ".join(a.in_flight) or "-",
                str(a.handled), f"{_duration(a.last_heartbeat_age)} ago",
                str(a.restarts) if not a.restarts else f"[yellow]{a.restarts}[/]",
                "[yellow]yes[/]" if a.draining else "no",
            )
        console.print(actors)
    else:
        console.print(f"[yellow]no live actors[/]: no heartbeat within {wait:g}s")
    if status.runs:
        render_runs(status.runs, console, title=f"active runs ({len(status.runs)})",
                    active=True)
    else:
        console.print("no active runs")


STATUS_STYLE = {"finished": "green", "failed": "red", "active": "yellow"}


def render_runs(runs: list[RunStatus], console: Console, *, title: str,
                active: bool = False) -> None:
    """One row per run. ``active`` (``plancast status``): each run's owner and lease; else
    (``plancast runs``): each run's status."""
    estimated = any(r.tokens_estimated for r in runs)
    # ~: the model server reported no usage for some calls, so they were estimated here
    table = Table(title=title, caption="~ tokens: estimated in part" if estimated else None)
    # Ids are there to copy: never cut; the goal and the owner wrap instead.
    table.add_column("run", no_wrap=True, min_width=max(len(r.run_id) for r in runs))
    table.add_column("goal")
    if active:
        table.add_column("owner", overflow="fold")
    for column in ("lease",) if active else ("status",):
        table.add_column(column, no_wrap=True)
    for column in ("steps", "tokens", "age"):
        table.add_column(column, no_wrap=True, min_width=len(column))
    for r in runs:
        if active:
            middle = [escape(r.owner or "-"), _duration(r.lease_remaining)
                      if r.lease_remaining >= 0 else
                      f"[red]lapsed {_duration(-r.lease_remaining)} ago[/]"]
        else:
            middle = [f"[{STATUS_STYLE.get(r.status, 'white')}]{escape(r.status)}[/]"]
        table.add_row(escape(r.run_id), escape(_shorten(r.goal, 32)), *middle,
                      f"{r.steps_done}/{r.steps_total}",
                      f"~{r.tokens}" if r.tokens_estimated else str(r.tokens), _duration(r.age))
    console.print(table)


def render_roles(found: Iterable[RoleEntry], console: Console) -> None:
    """One row per role kind found in the entry-point group (what a team's ``kind``
    names), with whether it loads."""
    table = Table(title="plancast roles")
    for column in ("kind", "from", "version", "target", "status"):
        table.add_column(column)
    for r in sorted(found, key=lambda r: r.name):
        status = "[green]ok[/]" if r.ok else f"[red]failed: {r.error}[/]"
        table.add_row(r.name, r.package, r.version, r.target, status)
    console.print(table)


def render_saved_plans(found: dict[str, SavedPlan], console: Console) -> None:
    """The plans kept in the deployment by name."""
    table = Table(title=f"saved plans ({len(found)})", title_justify="left")
    for column in ("name", "goal", "steps", "parameters", "from run"):
        table.add_column(column)
    for name, plan in found.items():
        table.add_row(name, escape(plan.goal[:60]), str(len(plan.steps)),
                      ", ".join(sorted(parameters(plan))), plan.source_run)
    console.print(table)


def render_plan_awaiting(run_id: str, plan: PlanAwaitingApproval, console: Console) -> None:
    """A plan round held for approval: who reviews it, the time left, its steps."""
    console.print(f"run {run_id}: plan of round {plan.round} awaits approval "
                  f"({plan.reviewer}, {max(plan.deadline - time.time(), 0):.0f}s left; "
                  f"digest {plan.digest})", markup=False, soft_wrap=True)
    table = Table()
    for column in ("id", "role", "does", "after"):
        table.add_column(column)
    for step in plan.steps:
        does = (f"{step.tool} {msgspec.json.encode(step.args).decode()}" if step.tool
                else step.instruction or "")
        table.add_row(str(step.id), step.role, escape(does[:200]),
                      ", ".join(map(str, step.depends_on)))
    console.print(table)


def _shorten(text: str, width: int = 48) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds // 60:.0f}m{seconds % 60:02.0f}s"
    return f"{seconds // 3600:.0f}h{seconds % 3600 // 60:02.0f}m"
