"""A server's tools as plancast tools, and the servers a process opens for the roles it serves.

An MCP tool is a Tool like any other: its name is ``SERVER__TOOL``, its ``parameters`` are
the JSON Schema the server lists (so the plan's constraint and the agent's tool calls are
shaped by it), its text content is the step's output, and an ``isError`` result is a
ToolError (the attempt fails, and the replan reads the server's text).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from ..config import (
    MODEL_KINDS,
    SERVICE_KINDS,
    TeamConfig,
    TeamConfigError,
    mcp_tool_name,
    split_mcp_tool,
)
from .errors import McpUnavailable, ToolError
from .mcp_servers import INSTALL_HINT, ListedTool, McpServer
from .registry import _VALID_NAME as VALID_NAME

if TYPE_CHECKING:
    from mcp_types import CallToolResult

_DROPPED_KEYS = ("$schema", "title")
"""Schema keywords of no use to a model or a grammar."""


class McpTool:
    """One tool of an MCP server, called through its server's connection."""

    def __init__(self, server: McpServer, listed: ListedTool) -> None:
        self.server = server
        self.tool = listed.name
        self.name = mcp_tool_name(server.name, listed.name)
        self.description = listed.description or f"{listed.name} (MCP server {server.name})"
        schema = {k: v for k, v in listed.input_schema.items() if k not in _DROPPED_KEYS}
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        self.parameters: dict[str, Any] = schema

    async def run(self, args: dict[str, Any]) -> str:
        result = await self.server.call(self.tool, args)
        text = result_text(result)
        if result.is_error:
            raise ToolError(f"MCP tool {self.name!r} answered with an error: {text}")
        return text

    def __repr__(self) -> str:
        return f"<McpTool {self.name!r}>"


def result_text(result: CallToolResult) -> str:
    """The result as one text: its text parts, a line for anything else, or its structured
    content as JSON when it has no text."""
    parts: list[str] = []
    for item in result.content:
        kind = getattr(item, "type", "")
        if kind == "text":
            parts.append(item.text)  # type: ignore[union-attr]
        elif kind == "resource" and hasattr(getattr(item, "resource", None), "text"):
            parts.append(item.resource.text)  # type: ignore[union-attr]
        elif kind == "resource_link":
            parts.append(f"[resource {getattr(item, 'uri', '')}]")
        else:
            mime = getattr(item, "mime_type", "") or ""
            parts.append(f"[{kind} content {mime}]".replace(" ]", "]"))
    if not parts and result.structured_content is not None:
        return msgspec.json.encode(result.structured_content).decode()
    return "\n".join(parts)


def mcp_tools_wanted(team: TeamConfig, roles: Sequence[str] | None) -> dict[str, set[str]]:
    """``{server: {tool, ...}}``: the MCP tools this process must offer to serve ``roles``
    (every role when None). A planner gets every executor's, for their schemas: they shape
    its plans (it never calls them)."""
    served = [team.roles[name] for name in (roles or list(team.roles)) if name in team.roles]
    sources = [r for r in served if r.kind not in MODEL_KINDS | SERVICE_KINDS]
    if any(r.kind == "planner" for r in served):
        sources = team.executors()
    wanted: dict[str, set[str]] = {}
    for role in sources:
        for name in role.tools:
            parts = split_mcp_tool(name)
            if parts is not None and parts[0] in team.mcp:
                wanted.setdefault(parts[0], set()).add(parts[1])
    return wanted


@asynccontextmanager
async def open_mcp_tools(team: TeamConfig, roles: Sequence[str] | None = None,
                         ) -> AsyncIterator[list[McpTool]]:
    """Start (or connect to) the MCP servers the ``roles`` use and yield their allowed tools.

    A server that does not start, or lacks a tool a role names, is a TeamConfigError (one
    line each). The servers stop when the block ends."""
    wanted = mcp_tools_wanted(team, roles)
    if not wanted:
        yield []
        return
    try:
        import mcp  # noqa: F401
    except ImportError:
        names = ", ".join(f"[mcp.{s}]" for s in sorted(wanted))
        raise McpUnavailable(f"the team file uses MCP servers ({names}) but the mcp package "
                             f"is not installed: {INSTALL_HINT}") from None
    servers = {name: McpServer(name, team.mcp[name]) for name in sorted(wanted)}
    problems: list[str] = []
    async with anyio.create_task_group() as tg:
        for server in servers.values():
            try:
                await tg.start(server.keep)
            except TeamConfigError as exc:  # it did not start
                problems.append(str(exc))
        problems = problems or _missing(team, servers, wanted)
        if problems:  # raised outside the task group: one plain error, not a group of one
            tg.cancel_scope.cancel()
        else:
            try:
                yield [McpTool(servers[s], servers[s].tools[t])
                       for s in servers for t in sorted(wanted[s])]
            finally:
                tg.cancel_scope.cancel()
    if problems:
        raise TeamConfigError("\n".join(problems))


def _missing(team: TeamConfig, servers: dict[str, McpServer],
             wanted: dict[str, set[str]]) -> list[str]:
    """A line for each tool a role names that its server does not offer."""
    problems = []
    for name, tools in wanted.items():
        for tool in sorted(tools):
            if not VALID_NAME.fullmatch(mcp_tool_name(name, tool)):
                problems.append(
                    f"tool {mcp_tool_name(name, tool)!r} of MCP server {name!r} cannot be "
                    "used: a tool's name must be letters, digits, _ and - (at most 64 with "
                    "its server's name)")
        offered = servers[name].tools
        for tool in sorted(tools - set(offered)):
            full = mcp_tool_name(name, tool)
            roles = [r.name for r in team.executors() if full in r.tools]
            problems.append(
                f"role {roles[0]!r} lists tool {full!r}, but MCP server {name!r} does not "
                f"offer {tool!r} (its tools: {', '.join(sorted(offered)) or 'none'})")
    return problems


@dataclass(frozen=True)
class ServerSurvey:
    """What one MCP server of a team offers (``plancast roles --team``)."""

    name: str
    where: str
    """``stdio: COMMAND ARGS`` or ``http: URL``."""
    tools: dict[str, str]
    """Its tools' names and descriptions; empty if it did not start."""
    allowed: dict[str, list[str]]
    """Tool name -> the roles whose ``tools`` allow it."""
    error: str = ""
    """Why it did not start (one line), if it did not."""


async def survey_mcp_servers(team: TeamConfig) -> list[ServerSurvey]:
    """Start each of the team's MCP servers in turn, list its tools and stop it."""
    found = []
    for name, config in sorted(team.mcp.items()):
        server = McpServer(name, config)
        error = ""
        try:
            import mcp  # noqa: F401
        except ImportError:
            error = f"the mcp package is not installed: {INSTALL_HINT}"
        else:
            async with anyio.create_task_group() as tg:
                try:
                    await tg.start(server.keep)
                except TeamConfigError as exc:
                    error = str(exc)
                tg.cancel_scope.cancel()
        allowed: dict[str, list[str]] = {}
        for role in team.executors():
            for tool in role.tools:
                parts = split_mcp_tool(tool)
                if parts is not None and parts[0] == name:
                    allowed.setdefault(parts[1], []).append(role.name)
        found.append(ServerSurvey(
            name, server.where,
            {t.name: t.description for t in server.tools.values()}, allowed, error))
    return found
