"""Checks before any actor starts: every problem of the team as this process would serve
it, one line each and all at once, instead of actors crashing and restarting on them."""

from __future__ import annotations

from collections.abc import Sequence

from ..actor import discover_roles
from ..config import (
    MODEL_KINDS,
    SERVICE_KINDS,
    TeamConfig,
    TeamConfigError,
    option_problems,
    split_mcp_tool,
)
from ..errors import PlancastError
from ..tools import ToolRegistry


def preflight_problems(team: TeamConfig, tools: ToolRegistry, roles: Sequence[str] | None = None,
             ) -> list[str]:
    """What stops the named roles (all when None) from serving here, one line each."""
    found: list[str] = []
    installed = discover_roles()
    for name in roles or list(team.roles):
        if name not in team.roles:
            found.append(f"role {name!r} is not in the team file (its roles: "
                          f"{', '.join(team.roles)})")
            continue
        role = team.roles[name]
        if role.kind not in installed or not installed[role.kind].ok:
            why = installed[role.kind].error if role.kind in installed else "not installed"
            found.append(f"role {name!r} has kind {role.kind!r}, which cannot be loaded "
                         f"({why}; `plancast roles` lists the kinds)")
        else:
            found += option_problems(role, installed[role.kind].factory)
        if role.needs_model() and role.model is not None:
            try:
                role.model.api_key()
            except PlancastError as exc:
                found.append(f"role {name!r}: {exc}")
        if role.kind not in MODEL_KINDS | SERVICE_KINDS:
            for tool in role.tools:
                server = split_mcp_tool(tool)
                if server is not None and server[0] in team.mcp:
                    continue  # checked against what the server offers once it starts
                if tool not in tools:
                    found.append(f"role {name!r} lists tool {tool!r}, which this process does "
                                 f"not have (its tools: {', '.join(tools.names())}"
                                 + ("; read_file needs files_root in the team file"
                                    if tool == "read_file" else "")
                                 + _no_server(team, tool) + ")")
    return found


def _no_server(team: TeamConfig, tool: str) -> str:
    """A hint for ``server__tool`` whose server the team file does not declare."""
    server = split_mcp_tool(tool)
    if server is None:
        return ""
    return (f"; to use an MCP server's tool, declare the server as [mcp.{server[0]}] (the "
            f"team's MCP servers: {', '.join(sorted(team.mcp)) or 'none'})")


def preflight(team: TeamConfig, tools: ToolRegistry, roles: Sequence[str] | None = None) -> None:
    """Raise one ``TeamConfigError`` listing every problem, if there is any."""
    if found := preflight_problems(team, tools, roles):
        raise TeamConfigError("\n".join(found))
