"""MCP servers' tools, called through the official SDK on real server processes: ours (stdio
and streamable HTTP) and the reference filesystem server from the npm registry.

Each test opens the servers as a worker would (``open_mcp_tools``) and calls the tools as
an executor does. Deaths and deadlines are real: a server process is killed mid-call, a
call outlives its cancel scope.
"""

from __future__ import annotations

import json
import shutil
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime.config import TeamConfigError, team_from_dict
from runtime.tools import (
    McpTool,
    StepContext,
    ToolArgumentsError,
    ToolError,
    ToolRegistry,
    current_step,
    open_mcp_tools,
)

from ..mcp import SERVER, filesystem_server, http_server, kill_in_call, stdio_server
from ..needs import BWRAP
from ..subprocesses import plancast

pytestmark = pytest.mark.anyio

WAIT = 30.0
"""A guard on waits for a server's process (started by Python under a loaded machine)."""


def team(servers: dict[str, Any], tools: list[str]) -> Any:
    return team_from_dict({"mcp": servers,
                           "roles": {"worker": {"tool_steps_only": True, "tools": tools}}})


def by_name(tools: list[McpTool]) -> dict[str, McpTool]:
    return {t.name: t for t in tools}


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_servers_allowed_tools_are_tools_with_its_schemas(transport: str) -> None:
    """Only the tools the roles name are offered, named SERVER__TOOL, with the server's
    argument schema; a call's text is the output and an isError result a ToolError."""
    async with http_server() if transport == "http" else nullcontext() as url:
        config = {"url": url} if url else stdio_server()
        async with open_mcp_tools(team({"t": config}, ["t__add", "t__lookup"])) as found:
            tools = by_name(found)
            assert sorted(tools) == ["t__add", "t__lookup"]  # not slow, pid, read_text
            add = tools["t__add"]
            assert add.parameters["properties"]["a"]["type"] == "integer"
            assert add.parameters["required"] == ["a", "b"]
            assert await ToolRegistry(found).run("t__add", {"a": 2, "b": 40}) == "42"
            with pytest.raises(ToolError, match="no fact named 'nope'; known keys"):
                await tools["t__lookup"].run({"key": "nope"})


async def test_an_invalid_params_error_is_the_arguments_fault() -> None:
    """A JSON-RPC invalid-params answer is a ToolArgumentsError: not retried as is."""
    async with open_mcp_tools(team({"t": stdio_server()}, ["t__square"])) as (square,):
        assert await square.run({"n": 7}) == "49"
        with pytest.raises(ToolArgumentsError, match="refused the arguments of 'square': n must "
                                                     "be at least 0, not -1"):
            await square.run({"n": -1})


async def test_a_call_inside_a_step_carries_the_attempts_idempotency_key() -> None:
    """In ``_meta`` (``plancast/idempotency-key``): a server acting on the world can do the
    attempt's act once; a call outside a step carries none."""
    async with open_mcp_tools(team({"t": stdio_server()}, ["t__key_seen"])) as (key_seen,):
        assert await key_seen.run({}) == "none"
        token = current_step.set(StepContext("run-1", 3, 2, 1, "worker/a",
                                             idempotency_key="pk-attempt-2"))
        try:
            assert await key_seen.run({}) == "pk-attempt-2"
        finally:
            current_step.reset(token)


async def test_a_server_killed_mid_call_fails_the_call_with_a_reason_and_comes_back(
        tmp_path: Path) -> None:
    marker = tmp_path / "in-call"
    servers = {"t": stdio_server(MCP_TEST_MARKER=str(marker))}
    async with open_mcp_tools(team(servers, ["t__slow", "t__pid"])) as found:
        tools = by_name(found)
        first_pid = await tools["t__pid"].run({})

        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(kill_in_call, marker)
                with pytest.raises(ToolError, match="stopped during the call to 'slow'"):
                    await tools["t__slow"].run({"seconds": 60})
            while True:  # restarted with backoff; meanwhile calls fail saying why
                try:
                    second_pid = await tools["t__pid"].run({})
                    break
                except ToolError as exc:
                    assert "is down" in str(exc) and "started again" in str(exc)
                    await anyio.sleep(0.1)
        assert second_pid != first_pid


async def test_a_call_is_cancelled_with_its_deadline_and_the_server_serves_on() -> None:
    async with open_mcp_tools(team({"t": stdio_server()}, ["t__slow", "t__add"])) as found:
        tools = by_name(found)
        with anyio.move_on_after(0.5) as scope:
            await tools["t__slow"].run({"seconds": 60})
        assert scope.cancelled_caught
        with anyio.fail_after(WAIT):
            assert await tools["t__add"].run({"a": 1, "b": 1}) == "2"


async def test_a_tool_the_server_does_not_offer_is_one_line_at_start_up() -> None:
    with pytest.raises(TeamConfigError) as caught:
        async with open_mcp_tools(team({"t": stdio_server()}, ["t__add", "t__nope"])):
            pass  # pragma: no cover
    assert str(caught.value) == (
        "role 'worker' lists tool 't__nope', but MCP server 't' does not offer 'nope' "
        "(its tools: add, key_seen, lookup, pid, read_text, slow, square)")


async def test_a_server_that_does_not_start_is_one_line_at_start_up() -> None:
    servers = {"t": {"command": "/nonexistent/mcp-server"}}
    with pytest.raises(TeamConfigError, match=r"MCP server 't' did not start: .*\[mcp.t\]"):
        async with open_mcp_tools(team(servers, ["t__add"])):
            pass  # pragma: no cover


async def test_roles_that_name_no_mcp_tool_start_no_server() -> None:
    servers = {"t": {"command": "/nonexistent/mcp-server"}}
    async with open_mcp_tools(team(servers, ["math"])) as found:
        assert found == []


@BWRAP
async def test_a_sandboxed_server_sees_only_its_working_directory(tmp_path: Path) -> None:
    """``sandbox = true``: the server runs in bubblewrap; a file outside its working
    directory is not there for it, though the same server unsandboxed reads it."""
    home = tmp_path / "server"
    home.mkdir()
    shutil.copy(SERVER, home / "server.py")
    (home / "inside.txt").write_text("inside")
    outside = tmp_path / "outside.txt"
    outside.write_text("secret")
    boxed = {"command": sys.executable, "args": ["server.py"], "cwd": str(home),
             "sandbox": True}
    plain = {**boxed, "sandbox": False}
    async with open_mcp_tools(team({"box": boxed, "open": plain},
                                   ["box__read_text", "open__read_text"])) as found:
        tools = by_name(found)
        assert await tools["box__read_text"].run({"path": "inside.txt"}) == "inside"
        with pytest.raises(ToolError, match="cannot read"):
            await tools["box__read_text"].run({"path": str(outside)})
        assert await tools["open__read_text"].run({"path": str(outside)}) == "secret"


async def test_the_reference_filesystem_server_from_npm(tmp_path: Path) -> None:
    """``@modelcontextprotocol/server-filesystem``, from the lock file: its tools and their
    schemas as it lists them, and its refusal of a path outside its root as a ToolError."""
    command = filesystem_server()
    (tmp_path / "notes.txt").write_text("plancast reads this through MCP\n")
    servers = {"fs": {"command": command[0], "args": [*command[1:], str(tmp_path)]}}
    tools_named = ["fs__read_text_file", "fs__list_directory"]
    async with open_mcp_tools(team(servers, tools_named)) as found:
        tools = by_name(found)
        assert tools["fs__read_text_file"].parameters["required"] == ["path"]
        listing = await tools["fs__list_directory"].run({"path": str(tmp_path)})
        assert "notes.txt" in listing
        text = await tools["fs__read_text_file"].run({"path": str(tmp_path / "notes.txt")})
        assert text.strip() == "plancast reads this through MCP"
        with pytest.raises(ToolError, match="outside allowed directories"):
            await tools["fs__read_text_file"].run({"path": "/etc/hostname"})


async def test_plancast_worker_with_a_tool_the_server_lacks_says_so_in_one_line_and_exits_2(
        tmp_path: Path) -> None:
    server = stdio_server()
    (tmp_path / "team.toml").write_text(f"""
[mcp.t]
command = {json.dumps(server["command"])}
args = {json.dumps(server["args"])}

[roles.worker]
tools = ["t__add", "t__nope"]
tool_steps_only = true
""")
    done = await plancast("worker", "--role", "worker", "--team", "team.toml", cwd=tmp_path)
    said = done.stderr.decode().strip()
    assert done.returncode == 2, said
    assert said == (
        "error: role 'worker' lists tool 't__nope', but MCP server 't' does not offer 'nope' (its "
        "tools: add, key_seen, lookup, pid, read_text, slow, square)")
    assert "Traceback" not in said


async def test_plancast_roles_lists_each_servers_tools_and_the_roles_that_may_use_them(
        tmp_path: Path) -> None:
    server = stdio_server()
    (tmp_path / "team.toml").write_text(f"""
[mcp.t]
command = {json.dumps(server["command"])}
args = {json.dumps(server["args"])}

[roles.worker]
tools = ["t__add"]
tool_steps_only = true
""")
    done = await plancast("roles", "--team", "team.toml", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    (listed,) = json.loads(done.stdout)["mcp"]
    assert listed["server"] == "t" and listed["error"] == ""
    tools = {t["name"]: t["roles"] for t in listed["tools"]}
    assert tools == {"add": ["worker"], "key_seen": [], "lookup": [], "pid": [], "read_text": [],
                     "slow": [], "square": []}


async def test_a_tool_name_that_does_not_fit_is_one_line_at_start_up() -> None:
    name = "t__" + "x" * 62  # 65 characters: more than a model's function name may have
    with pytest.raises(TeamConfigError, match=f"tool '{name}' of MCP server 't' cannot be used"):
        async with open_mcp_tools(team({"t": stdio_server()}, [name])):
            pass  # pragma: no cover
