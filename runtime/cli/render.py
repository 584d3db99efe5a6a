"""The tables commands print: what a deployment is doing (``plancast status``, ``plancast
runs``), the roles installed, the plans kept and a plan awaiting approval."""

from __future__ import annotations

import time
from collections.abc import Iterable

import msgspec
from rich.console import Console
from rich.text import Text

from protocols import PlanAwaitingApproval, SavedPlan

from ..actor import RoleEntry
from ..client import DeploymentStatus, RunStatus, parameters
from ..config import mcp_tool_name
from ..tools import ServerSurvey
from .fit import Column, fitted_table, plain


def render_status(status: DeploymentStatus, console: Console, *, wait: float) -> None:
    """Print the two tables people read."""
    if status.actors:
        console.print(fitted_table(*_actors(status, wide=console.width >= WIDE),
                                   console.width, title=f"live actors ({len(status.actors)})"))
    else:
        console.print(Text.assemble(("no live actors", "yellow"),
                                    f": no heartbeat within {wait:g}s"))
    if status.runs:
        render_runs(status.runs, console, title=f"active runs ({len(status.runs)})",
                    active=True)
    else:
        console.print("no active runs", markup=False)


WIDE = 100
"""From this terminal width on, ``plancast status`` shows each actor's host and pid (the
instance id names both) and its restarts and draining in columns of their own."""


def _actors(status: DeploymentStatus, *, wide: bool) -> tuple[list[Column], list[list[Text]]]:
    """The live actors table's columns and rows, wide or narrow."""
    columns = [Column("role", cap=16), Column("instance", share=2)]
    if wide:
        columns += [Column("host", share=1), Column("pid")]
    tools = any(a.tools for a in status.actors)  # a column only when some actor has tools
    columns += [Column("in flight", share=2)] + ([Column("tools", share=3)] if tools else [])
    columns += [Column("handled"), Column("last beat")]
    columns += [Column("restarts"), Column("draining")] if wide else [Column("state", cap=10)]
    rows: list[list[Text]] = []
    for a in status.actors:
        row = [plain(a.role), plain(a.instance)]
        if wide:
            row += [plain(a.host), plain(a.pid)]
        row += [plain(", ".join(a.in_flight) or "-")]
        row += [plain("\n".join(a.tools) or "-")] if tools else []  # one a line
        row += [plain(a.handled), plain(f"{_duration(a.last_heartbeat_age)} ago")]
        if wide:
            row += [Text(str(a.restarts), style="yellow" if a.restarts else ""),
                    Text("yes", style="yellow") if a.draining else plain("no")]
        else:
            said = [f"{a.restarts} restarts"] if a.restarts else []
            said += ["draining"] if a.draining else []
            row.append(Text(", ".join(said), style="yellow") if said else plain("ok"))
        rows.append(row)
    return columns, rows


STATUS_STYLE = {"finished": "green", "failed": "red", "active": "yellow"}


def render_runs(runs: list[RunStatus], console: Console, *, title: str,
                active: bool = False) -> None:
    """One row per run. ``active`` (``plancast status``): each run's owner and lease; else
    (``plancast runs``): each run's status."""
    estimated = any(r.tokens_estimated for r in runs)
    # ~: the model server reported no usage for some calls, so they were estimated here
    caption = "~ tokens: estimated in part" if estimated else None
    # Ids are there to copy: never cut; the goal and the owner wrap instead.
    columns = [Column("run"), Column("goal", share=3)]
    columns += ([Column("owner", share=2), Column("lease")] if active else [Column("status")])
    columns += [Column("steps"), Column("tokens"), Column("age")]
    rows: list[list[Text]] = []
    for r in runs:
        if active:
            middle = [plain(r.owner or "-"),
                      plain(_duration(r.lease_remaining)) if r.lease_remaining >= 0 else
                      Text(f"lapsed {_duration(-r.lease_remaining)} ago", style="red")]
        else:
            middle = [Text(r.status, style=STATUS_STYLE.get(r.status, "white"))]
        rows.append([plain(r.run_id), plain(_shorten(r.goal, 32)), *middle,
                     plain(f"{r.steps_done}/{r.steps_total}"),
                     plain(f"~{r.tokens}" if r.tokens_estimated else r.tokens),
                     plain(_duration(r.age))])
    console.print(fitted_table(columns, rows, console.width, title=title, caption=caption))


def render_roles(found: Iterable[RoleEntry], console: Console) -> None:
    """One row per role kind found in the entry-point group (what a team's ``kind``
    names), with whether it loads."""
    columns = [Column("kind"), Column("from", share=1), Column("version"),
               Column("target", share=2), Column("status", share=2)]
    rows = [[plain(r.name), plain(r.package), plain(r.version), plain(r.target),
             Text("ok", style="green") if r.ok else Text(f"failed: {r.error}", style="red")]
            for r in sorted(found, key=lambda r: r.name)]
    console.print(fitted_table(columns, rows, console.width, title="plancast roles"))


def render_mcp_servers(servers: Iterable[ServerSurvey], console: Console) -> None:
    """One row per tool of each MCP server of a team, with the roles that may use it."""
    columns = [Column("tool (as plans name it)", share=1), Column("roles", share=1),
               Column("description", share=3)]
    for server in servers:
        title = f"MCP server {server.name} ({server.where})"
        if server.error:
            console.print(Text.assemble((title, "bold"), ": ", (server.error, "red")))
            continue
        rows = [[plain(mcp_tool_name(server.name, tool)),
                 plain(", ".join(server.allowed.get(tool, [])) or "-"),
                 plain(_shorten(description, 120))]
                for tool, description in sorted(server.tools.items())]
        console.print(fitted_table(columns, rows, console.width, title=title))


def render_saved_plans(found: dict[str, SavedPlan], console: Console) -> None:
    """The plans kept in the deployment by name."""
    columns = [Column("name", share=1), Column("goal", share=3), Column("steps"),
               Column("parameters", share=1), Column("from run")]
    rows = [[plain(name), plain(_shorten(plan.goal, 60)), plain(len(plan.steps)),
             plain(", ".join(sorted(parameters(plan)))), plain(plan.source_run)]
            for name, plan in found.items()]
    console.print(fitted_table(columns, rows, console.width,
                               title=f"saved plans ({len(found)})", title_justify="left"))


def render_plan_awaiting(run_id: str, plan: PlanAwaitingApproval, console: Console) -> None:
    """A plan round held for approval: who reviews it, the time left, its steps."""
    console.print(f"run {run_id}: plan of round {plan.round} awaits approval "
                  f"({plan.reviewer}, {max(plan.deadline - time.time(), 0):.0f}s left; "
                  f"digest {plan.digest})", markup=False, soft_wrap=True)
    columns = [Column("id"), Column("role", share=1), Column("does", share=4),
               Column("after", share=1)]
    rows: list[list[Text]] = []
    for step in plan.steps:
        does = (f"{step.tool} {msgspec.json.encode(step.args).decode()}" if step.tool
                else step.instruction or "")
        rows.append([plain(step.id), plain(step.role), plain(_shorten(does, 200)),
                     plain(", ".join(map(str, step.depends_on)))])
    console.print(fitted_table(columns, rows, console.width))


def _shorten(text: str, width: int = 48) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds // 60:.0f}m{seconds % 60:02.0f}s"
    return f"{seconds // 3600:.0f}h{seconds % 3600 // 60:02.0f}m"
