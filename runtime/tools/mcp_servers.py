"""MCP servers as tool sources: one connection per server, kept alive by a task of its own.

The worker serving a role starts (stdio) or connects to (streamable HTTP) each server the
role's tools name, lists its tools once, and keeps the connection: a server that dies is
restarted with backoff, and calls meanwhile fail at once with the reason, so a step fails
(and is retried or replanned) instead of hanging. The official ``mcp`` SDK is an optional
extra (``pip install 'plancast[mcp]'``): it is imported only when a team file declares a
server, and only here.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from ..config import McpServerConfig, TeamConfigError
from .context import current_step
from .errors import ToolArgumentsError, ToolError
from .sandbox import _system_binds, find_bwrap

if TYPE_CHECKING:
    from mcp.client.session import ClientSession
    from mcp_types import CallToolResult

log = logging.getLogger(__name__)

PING_INTERVAL = 2.0
"""Seconds between pings of an idle server: how soon a death nobody called into is seen."""
PING_TIMEOUT = 10.0
IDEMPOTENCY_META = "plancast/idempotency-key"
"""The ``_meta`` key of a call made inside a step: the attempt's idempotency key, the same
on every execution of the attempt (``StepContext.idempotency_key``), so a server whose
tool acts on the world can do it once."""
FIRST_BACKOFF = 0.5
MAX_BACKOFF = 30.0
STABLE = 60.0
"""A server up this long before it stopped is started again after the first backoff."""
INSTALL_HINT = "pip install 'plancast[mcp]' (the official MCP SDK)"


@dataclass(frozen=True)
class ListedTool:
    """One tool as the server listed it."""

    name: str
    description: str
    input_schema: dict[str, Any]


class McpServer:
    """One server's connection: ``keep`` runs it (restarting it), ``call`` uses it."""

    def __init__(self, name: str, config: McpServerConfig) -> None:
        self.name = name
        self.config = config
        self.tools: dict[str, ListedTool] = {}
        """What it offered when it first started (a restart does not change a role's tools)."""
        self.restarts = 0
        self._session: ClientSession | None = None
        self._broken = anyio.Event()
        self._down = "it has not started yet"
        self._retry_at = 0.0

    @property
    def up(self) -> bool:
        return self._session is not None

    async def keep(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
                   ) -> None:
        """Start, list the tools, serve calls; when it dies, start it again after a backoff.

        Reports started once the first listing is in; a first start that fails raises
        TeamConfigError (the worker does not start with a server it cannot reach)."""
        started = False
        delay = FIRST_BACKOFF
        while True:
            try:
                async with self._connected(first=not started) as session:
                    self._session, self._broken = session, anyio.Event()
                    if not started:
                        started = True
                        task_status.started()
                    else:
                        log.warning("MCP server %r is back", self.name)
                    up_since = anyio.current_time()
                    await self._watch(session)
                    if anyio.current_time() - up_since > STABLE:  # not a crash loop
                        delay = FIRST_BACKOFF
                    reason = "its connection closed"
            except Exception as exc:
                if not started and isinstance(exc, TeamConfigError):
                    raise
                if not started:
                    raise TeamConfigError(
                        f"MCP server {self.name!r} did not start: {_why(exc)} (check "
                        f"[mcp.{self.name}] in the team file)") from None
                reason = _why(exc)
            finally:
                self._session = None
            self.restarts += 1
            if not self._broken.is_set():  # else a call saw it die, and said why
                self._down = f"it stopped ({reason})"
            self._retry_at = anyio.current_time() + delay
            log.warning("MCP server %r stopped (%s); starting it again in %.1fs", self.name,
                        reason, delay)
            await anyio.sleep(delay)
            delay = min(delay * 2, MAX_BACKOFF)

    @asynccontextmanager
    async def _connected(self, *, first: bool) -> AsyncIterator[ClientSession]:
        from mcp.client.session import ClientSession

        async with self._transport() as (read, write), ClientSession(read, write) as session:
            with anyio.fail_after(self.config.start_timeout):
                await session.initialize()
                if first:
                    self.tools = await _list_tools(session)
            yield session

    @asynccontextmanager
    async def _transport(self) -> AsyncIterator[Any]:
        if self.config.url:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            async with httpx2.AsyncClient(headers=self.config.headers,
                                          timeout=httpx2.Timeout(30.0, read=300.0)) as http, \
                    streamable_http_client(self.config.url, http_client=http) as streams:
                yield streams
            return
        from mcp.client.stdio import StdioServerParameters, stdio_client

        with tempfile.TemporaryDirectory(prefix="plancast-mcp-") as scratch:
            command, args, env, cwd = self._command(Path(scratch))
            params = StdioServerParameters(command=command, args=args, env=env, cwd=cwd)
            async with stdio_client(params) as streams:
                yield streams

    def _command(self, scratch: Path) -> tuple[str, list[str], dict[str, str] | None, str | None]:
        """The program to start: as configured, or wrapped in bubblewrap (``sandbox``)."""
        config = self.config
        cwd = str(config.cwd) if config.cwd else None
        if not config.sandbox:
            return config.command, list(config.args), dict(config.env) or None, cwd
        bwrap = find_bwrap()
        if bwrap is None:
            raise TeamConfigError(
                f"[mcp.{self.name}] asks for sandbox = true, but bubblewrap is not installed: "
                "install it (apt-get install bubblewrap) or set sandbox = false")
        program = shutil.which(config.command, path=os.environ.get("PATH")) or config.command
        workdir = Path(cwd).resolve() if cwd else scratch
        argv = sandboxed_server(bwrap, [program, *config.args], workdir, config.env)
        return argv[0], argv[1:], None, None

    async def _watch(self, session: ClientSession) -> None:
        """Returns once the connection is broken: a call saw it die, or a ping failed."""
        while True:
            with anyio.move_on_after(PING_INTERVAL):
                await self._broken.wait()
                return
            try:
                with anyio.fail_after(PING_TIMEOUT):
                    await session.send_ping()
            except Exception:
                return

    async def call(self, tool: str, args: dict[str, Any]) -> CallToolResult:
        """Call a tool; the caller's cancel scope (the step's deadline) bounds it."""
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED, INVALID_PARAMS

        session = self._session
        if session is None:
            wait = self._retry_at - anyio.current_time()
            when = f" (next try in {wait:.1f}s)" if wait > 0 else ""
            raise ToolError(f"MCP server {self.name!r} is down: {self._down}; it is being "
                            f"started again{when}")
        step = current_step.get()
        meta: Any = {IDEMPOTENCY_META: step.idempotency_key} \
            if step is not None and step.idempotency_key else None
        try:
            return await session.call_tool(tool, args, meta=meta)
        except MCPError as exc:
            if exc.code == INVALID_PARAMS:  # the arguments' fault: the same ones fail again
                raise ToolArgumentsError(f"MCP server {self.name!r} refused the arguments of "
                                         f"{tool!r}: {exc.message}") from None
            if exc.code != CONNECTION_CLOSED:
                raise ToolError(f"MCP server {self.name!r} refused the call to {tool!r}: "
                                f"{exc.message}") from None
            reason = exc.message
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            reason = type(exc).__name__
        if self._session is session:  # the first to see it: calls from now on fail at once
            self._session, self._down = None, f"it stopped ({reason})"
            self._retry_at = anyio.current_time() + FIRST_BACKOFF
            self._broken.set()  # and its keeper starts it again
        raise ToolError(f"MCP server {self.name!r} stopped during the call to {tool!r} "
                        f"({reason}); it is being started again")

    @property
    def where(self) -> str:
        """``stdio: COMMAND ARGS`` or ``http: URL``."""
        place = self.config.url or " ".join([self.config.command, *self.config.args])
        return f"{self.config.transport}: {place}"


async def _list_tools(session: ClientSession) -> dict[str, ListedTool]:
    """Every tool the server offers, following its pages."""
    from mcp_types import PaginatedRequestParams

    found: dict[str, ListedTool] = {}
    cursor: str | None = None
    while True:
        params = PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        for item in page.tools:
            found[item.name] = ListedTool(item.name, item.description or "",
                                          dict(item.input_schema))
        cursor = page.next_cursor
        if not cursor:
            return found


def _why(exc: BaseException) -> str:
    """The innermost cause of a failure, in one line."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "it did not answer in time"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def sandboxed_server(bwrap: str, command: list[str], workdir: Path,
                     env: dict[str, str]) -> list[str]:
    """A stdio server's command inside bubblewrap: a read-only system and Python, the
    program's own installation read-only, ``workdir`` writable (its working directory), no
    network, no home, only ``env`` (and PATH) in its environment."""
    # /tmp first: a Python installed under /tmp (a CI's venv) is bound over it, not hidden
    args = [bwrap, *_system_binds(), "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    seen: set[str] = {"/tmp"}
    program = Path(os.path.realpath(command[0]))
    for place in (sys.base_prefix, sys.prefix, str(program.parent.parent)):
        real = os.path.realpath(place)
        if real.startswith("/usr/") or real in ("/", "/usr") or real in seen:
            continue
        seen.add(real)
        for parent in reversed(Path(real).parents[:-1]):
            if str(parent) not in seen:
                seen.add(str(parent))
                args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", real, real]
    args += ["--bind", str(workdir), str(workdir), "--chdir", str(workdir),
             "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
             "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--clearenv",
             "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", str(workdir),
             "--setenv", "TMPDIR", "/tmp", "--setenv", "LANG", "C.UTF-8"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    if os.geteuid() != 0:
        args += ["--unshare-user", "--cap-drop", "ALL"]
    else:
        args += ["--cap-drop", "ALL"]
    return [*args, "--", *command]
