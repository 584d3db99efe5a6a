"""Runs whose steps call MCP tools: a real MCP server process (ours, built with the SDK), a
real nats-server, an in-process team and the scripted model.

A plan step calls an MCP tool directly; an agent step calls one through the model's tool
calls; the server's schemas shape the planner's constraint and the agent's tool list; a
tool outside the role's allow-list is refused at the plan; an ``isError`` result fails the
attempt and its text reaches the replan; a server killed mid-call fails the step saying
why.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from protocols import PlanRejected, ReplanStarted, StepFailed
from runtime.bus import Bus
from runtime.client import DeploymentStatus, collect_status
from runtime.testing import Rule, ScriptedToolCall

from ..mcp import http_server, kill_in_call, stdio_server
from .harness import finish, last_user_message, plan_line, run_team

pytestmark = pytest.mark.anyio

RESEARCHER = {"description": "looks facts up", "model": "scripted", "tools": ["t__lookup"]}


def mcp_worker(*tools: str) -> dict[str, Any]:
    """A tool-only role allowed these MCP tools (and nothing else of the server's)."""
    return {"description": "runs MCP tools", "tools": list(tools), "tool_steps_only": True}


def step_args(schema: Any, tool: str) -> list[dict[str, Any]]:
    """The ``args`` schemas of the plan steps that call ``tool``, wherever they sit."""
    found: list[dict[str, Any]] = []
    if isinstance(schema, dict):
        props = schema.get("properties", {})
        if isinstance(props, dict) and props.get("tool", {}).get("enum") == [tool]:
            found.append(props["args"])
        for value in schema.values():
            found += step_args(value, tool)
    elif isinstance(schema, list):
        for value in schema:
            found += step_args(value, tool)
    return found


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_plan_step_calls_an_mcp_tool(nats_url: str, prefix: str, transport: str) -> None:
    """The step's output is the tool's; the plan's JSON schema carried the tool's arguments."""
    rules = [Rule(role="planner", lines=['{"steps": [',
                                         plan_line(1, "mcp", tool="t__add", args={"a": 2, "b": 40}),
                                         "]}"]),
             finish("the sum is $1")]
    if transport == "http":
        async with http_server() as url:
            out = await run_team(nats_url, prefix, rules, roles={"mcp": mcp_worker("t__add")},
                                 mcp={"t": {"url": url}}, model={"structured": "json_schema"})
    else:
        out = await run_team(nats_url, prefix, rules, roles={"mcp": mcp_worker("t__add")},
                             mcp={"t": stdio_server()}, model={"structured": "json_schema"})

    assert out.finished(1).output == "42"
    (args,) = step_args(out.by_role("planner")[0].constraint, "t__add")
    assert args["properties"]["a"]["type"] == args["properties"]["b"]["type"] == "integer"
    assert args["required"] == ["a", "b"]


async def test_the_plan_grammar_carries_an_mcp_tools_schema(nats_url: str, prefix: str) -> None:
    rules = [Rule(role="planner", lines=[plan_line(1, "mcp", tool="t__add",
                                                   args={"a": 1, "b": 2})]),
             finish("done")]
    out = await run_team(nats_url, prefix, rules, roles={"mcp": mcp_worker("t__add")},
                         mcp={"t": stdio_server()}, model={"structured": "grammar"})

    assert out.finished(1).output == "3"
    grammar = out.by_role("planner")[0].constraint
    found = re.search(r'"\\"t__add\\"," sp "\\"args\\":" sp (args-t\d+-0)', grammar)
    assert found, "step 1 may call t__add"
    assert f'{found[1]} ::= "{{" "\\"a\\":" sp int "," sp "\\"b\\":" sp int "}}"' in grammar


async def test_an_agent_step_calls_an_mcp_tool_through_tool_calls(
        nats_url: str, prefix: str) -> None:
    rules = [
        Rule(role="planner", lines=[plan_line(1, "researcher", instruction="what is NATS?")]),
        Rule(role="researcher", turn=1, tool_calls=[
            ScriptedToolCall(name="t__lookup", arguments=json.dumps({"key": "nats"}))]),
        Rule(role="researcher", tool_result_contains="JetStream",
             text="NATS is a messaging system with JetStream."),
        finish("$1"),
    ]
    out = await run_team(nats_url, prefix, rules, roles={"researcher": RESEARCHER},
                         mcp={"t": stdio_server()})

    assert out.finished(1).output == "NATS is a messaging system with JetStream."
    first = out.by_role("researcher")[0].body
    (spec,) = first["tools"]
    assert spec["function"]["name"] == "t__lookup"
    assert spec["function"]["parameters"]["properties"]["key"]["type"] == "string"


async def test_a_tool_outside_the_allow_list_is_refused_at_the_plan(
        nats_url: str, prefix: str) -> None:
    """The server offers ``add``, but the role may use only ``lookup``."""
    rules = [
        Rule(role="planner", times=1, lines=[plan_line(1, "mcp", tool="t__add",
                                                       args={"a": 1, "b": 2})]),
        Rule(role="planner", lines=[plan_line(1, "mcp", tool="t__lookup",
                                              args={"key": "plancast"})]),
        finish("$1"),
    ]
    out = await run_team(nats_url, prefix, rules, roles={"mcp": mcp_worker("t__lookup")},
                         mcp={"t": stdio_server()})

    rejected = out.first(PlanRejected)
    assert "t__add" in rejected.error and rejected.retrying
    assert out.planned()[1].tool == "t__lookup"
    assert "plancast runs planner-executor" in out.finished(1).output


async def test_an_is_error_result_fails_the_attempt_and_reaches_the_replan(
        nats_url: str, prefix: str) -> None:
    rules = [
        Rule(role="planner", contains="A new plan is needed because",
             lines=[plan_line(2, "mcp", tool="t__lookup", args={"key": "nats"})]),
        Rule(role="planner", lines=[plan_line(1, "mcp", tool="t__lookup",
                                              args={"key": "natz"})]),
        finish("$2"),
    ]
    out = await run_team(nats_url, prefix, rules, roles={"mcp": mcp_worker("t__lookup")},
                         mcp={"t": stdio_server()}, step_attempts=1)

    failed = out.first(StepFailed, lambda e: e.step_id == 1)
    assert "no fact named 'natz'; known keys: nats, plancast" in failed.error
    assert out.first(ReplanStarted).round == 1
    assert "no fact named 'natz'" in last_user_message(out.by_role("planner")[1])
    assert "JetStream" in out.finished(2).output


async def test_a_server_killed_mid_call_fails_the_step_saying_why(
        nats_url: str, prefix: str, tmp_path: Path) -> None:
    marker = tmp_path / "in-call"

    async def kill_when_in_call(_bus: Bus, _run_id: str) -> None:
        await kill_in_call(marker)

    rules = [
        Rule(role="planner", contains="A new plan is needed because",
             lines=[plan_line(2, "mcp", tool="t__pid", args={})]),
        Rule(role="planner", lines=[plan_line(1, "mcp", tool="t__slow", args={"seconds": 60})]),
        finish("$2"),
    ]
    out = await run_team(nats_url, prefix, rules, roles={"mcp": mcp_worker("t__slow", "t__pid")},
                         mcp={"t": stdio_server(MCP_TEST_MARKER=str(marker))},
                         step_attempts=1, during=kill_when_in_call)

    failed = out.first(StepFailed, lambda e: e.step_id == 1)
    assert "MCP server 't' stopped during the call to 'slow'" in failed.error
    assert "being started again" in failed.error
    assert out.first(ReplanStarted).round == 1


async def test_status_lists_the_mcp_tools_each_actor_serves(nats_url: str, prefix: str) -> None:
    """``plancast status`` reads heartbeats: the MCP role's list its allowed tools."""
    seen: list[DeploymentStatus] = []

    async def status(bus: Bus, _run_id: str) -> None:
        seen.append(await collect_status(bus, wait=0.6))

    rules = [Rule(role="planner", lines=[plan_line(1, "mcp", tool="t__add",
                                                   args={"a": 1, "b": 2})]),
             finish("done")]
    await run_team(nats_url, prefix, rules, roles={"mcp": mcp_worker("t__add", "t__lookup")},
                   mcp={"t": stdio_server()}, settings={"heartbeat_interval": 0.2},
                   after=status)

    tools = {a.role: a.tools for a in seen[0].actors}
    assert tools["mcp"] == ["t__add", "t__lookup"]
    assert tools["planner"] == []
