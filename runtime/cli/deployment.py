"""The commands that serve a team and look at a deployment: ``worker``, ``up``, ``status``,
``roles`` and ``schema``."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Annotated, Any

import anyio
import msgspec
import typer

from protocols import json_schema

from ..actor import RoleEntry, build_team_actors, discover_roles
from ..bus import Bus, open_bus
from ..client import HEARTBEAT_WINDOWS, collect_status
from ..config import Settings, TeamConfig
from ..tools import ServerSurvey, ToolRegistry, open_mcp_tools, survey_mcp_servers
from ..worker import preflight, serve_actors
from .options import (
    Connection,
    Started,
    TeamOpt,
    VerboseOpt,
    begin,
    connection_flags,
    run_async,
    team_file,
    team_tools,
)
from .render import render_mcp_servers, render_roles, render_status
from .served import DEFAULT_TEAM, ServedTeam, check_same_team
from .terminal import console, err_console


def schema() -> None:
    """Print the JSON Schema of every public wire message."""
    json.dump(json_schema(), sys.stdout, indent=2)
    sys.stdout.write("\n")


def roles(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    team: Annotated[
        Path | None,
        typer.Option("--team", help="Also start this team file's MCP servers and list the "
                                    "tools each offers, and which roles may use them."),
    ] = None,
    verbose: VerboseOpt = False,
) -> None:
    """List the role kinds installed (the ``plancast.roles`` entry-point group): what a
    team file's ``kind = "..."`` may name; with ``--team``, its MCP servers' tools too."""
    found = discover_roles()
    if team is not None:
        team_config = team_file(team)

        async def main() -> int:
            servers = await survey_mcp_servers(team_config)
            _print_roles(found, servers, as_json)
            return 0 if all(not s.error for s in servers) else 1

        run_async(main, verbose=verbose)
    _print_roles(found, [], as_json)


def _print_roles(found: dict[str, RoleEntry], servers: list[ServerSurvey],
                 as_json: bool) -> None:
    if as_json:
        rows: Any = [
            {"name": r.name, "target": r.target, "package": r.package, "version": r.version,
             "ok": r.ok, "error": r.error}
            for r in found.values()
        ]
        if servers:
            rows = {"kinds": rows, "mcp": [
                {"server": s.name, "where": s.where, "error": s.error,
                 "tools": [{"name": t, "description": d, "roles": s.allowed.get(t, [])}
                           for t, d in sorted(s.tools.items())]}
                for s in servers]}
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    render_roles(found.values(), console)
    if servers:
        render_mcp_servers(servers, console)


@connection_flags()
def worker(
    role: Annotated[list[str], typer.Option("--role", "-r", help="Role to serve (repeatable).")],
    team: TeamOpt = None,
    *,
    connection: Connection,
    verbose: VerboseOpt = False,
) -> None:
    """Serve actors of the named roles until SIGTERM/SIGINT (then drain)."""
    _serve(begin(connection, verbose, "worker", needs="any", quiet=False), "worker", team, role)


@connection_flags()
def up(
    team: TeamOpt = None,
    *,
    connection: Connection,
    verbose: VerboseOpt = False,
) -> None:
    """Serve every role of the team in this process until SIGTERM/SIGINT.

    Where a local deployment runs already, this serves it too, if its team is the same."""
    _serve(begin(connection, verbose, "up", needs="any", quiet=False), "up", team, None)


def _serve(command: Started, name: str, team: Path | None, roles: list[str] | None) -> None:
    settings = command.settings

    async def main() -> int:
        path = team or DEFAULT_TEAM
        team_config = team_file(path)
        tools = team_tools(team_config)
        preflight(team_config, tools, roles)  # MCP servers' tools: checked once they start
        if command.local:  # joining the one `plancast up` runs: only to serve its team
            check_same_team(settings, name, path, team_config)
        async with open_mcp_tools(team_config, roles) as mcp_tools:  # checked as they start
            served = ToolRegistry([*tools, *mcp_tools]) if mcp_tools else tools
            await _serve_on_bus(settings, path, team_config, served, roles)
        return 0

    command.run(main)


async def _serve_on_bus(settings: Settings, path: Path, team_config: TeamConfig,
                        tools: ToolRegistry, roles: list[str] | None) -> None:
    if not settings.nats_url and roles:  # a worker alone on a server nobody can reach
        err_console.print("no --nats and no local deployment (plancast up): starting a "
                          "private server that only this process uses", markup=False,
                          highlight=False, soft_wrap=True)
    serves = ServedTeam.of(path, team_config).encode()  # if it starts the server
    async with open_bus(settings, serves=serves) as bus, anyio.create_task_group() as tg:
        actors = build_team_actors(bus, team_config, tools, roles)
        await tg.start(serve_actors, actors)  # said once they serve (and SIGTERM drains)
        names = ", ".join(f"{a.name}/{a.instance}" for a in actors)
        logging.getLogger("plancast").info("serving %s on %s (prefix %s)", names,
                                           bus.server_url, bus.prefix)


@connection_flags(nats_help="NATS server URL(s) of the running deployment (required).")
def status(
    *,
    connection: Connection,
    wait: Annotated[
        float | None,
        typer.Option("--wait", min=0.0,
                     help="Seconds to listen for heartbeats; default: 1.5 heartbeat intervals."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help='Print one JSON object {"actors": [...], "runs": [...]}.')
    ] = False,
    verbose: VerboseOpt = False,
) -> None:
    """Show the live actors (from their heartbeats) and the active runs of a deployment."""
    command = begin(connection, verbose, "status")
    window = HEARTBEAT_WINDOWS * command.settings.heartbeat_interval if wait is None else wait

    async def show(bus: Bus) -> int:
        found = await collect_status(bus, wait=window)
        if as_json:
            sys.stdout.write(msgspec.json.encode(found).decode() + "\n")
        else:
            render_status(found, console, wait=window)
        return 0

    command.on_bus(show)
