"""The planner's model is constrained per request, in the dialect its preset names.

The scripted model server records the constraint each request carried, so these tests
check what a real server would have been told: a replan's grammar starts at the next id
and lets it build on the finished steps; only the team's role/tool pairs are named.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from protocols import ReplanStarted
from runtime.testing import Rejection, Rule

from ..runtime.gbnf_check import parse_gbnf
from .harness import echo, finish, run_team

pytestmark = pytest.mark.anyio

REPLAN = [
    Rule(role="planner", contains="A new plan is needed because",
         lines=[echo(3, "round 1 saw: $1")]),
    Rule(role="planner", lines=[echo(1, "round 0 fact"), echo(2, "also $1")]),
    Rule(role="synthesizer", times=1,
         text=json.dumps({"action": "replan", "reason": "need a second look"})),
    finish("answer from round 1"),
]


async def test_grammar_follows_the_first_id_of_a_replan(nats_url: str, prefix: str) -> None:
    out = await run_team(nats_url, prefix, REPLAN, model={"structured": "grammar"})

    assert out.answer == "answer from round 1"
    assert out.first(ReplanStarted).round == 1
    first, second = (r.constraint for r in out.by_role("planner"))
    rules = parse_gbnf(first)
    assert '"{\\"id\\":" sp "1,' in rules.text("line-0")
    assert "ids-0" not in rules.names  # nothing to depend on before the first step
    rules = parse_gbnf(second)
    assert '"{\\"id\\":" sp "3,' in rules.text("line-0")
    assert rules.text("ids-0") == '"1" | "2"'  # round 0's finished steps


async def test_grammar_names_only_the_roles_tools(nats_url: str, prefix: str) -> None:
    roles: dict[str, Any] = {"writer": {"description": "writes", "model": "scripted",
                                        "tools": ["math"]}}
    rules = [Rule(role="planner", lines=[echo(1, "hi")]), finish("done")]
    out = await run_team(nats_url, prefix, rules, roles=roles, model={"structured": "grammar"})

    assert out.answer == "done"
    grammar = parse_gbnf(out.by_role("planner")[0].constraint)
    line = grammar.text("line-0")
    assert '"\\"worker\\","' in line and '"\\"writer\\","' in line
    tools = {t for name in grammar.names if name.startswith("tool-r")
             for t in grammar.literals(name)}
    assert tools == {'"math"'}  # an agent step of the writer may be given only math


async def test_a_server_that_refuses_the_grammar_fails_the_run_once_saying_what_to_set(
        nats_url: str, prefix: str) -> None:
    rules = [Rule(role="planner", lines=[echo(1, "hi")]), finish("done")]
    out = await run_team(nats_url, prefix, rules, model={"structured": "grammar"},
                         rejects=[Rejection(constraint="grammar")])

    failure = out.failure
    assert failure.cause == "config"
    assert "model preset 'scripted'" in failure.reason
    assert "does not speak structured = 'grammar'" in failure.reason
    assert "set structured = " in failure.reason and "[models.scripted]" in failure.reason
    assert len(out.by_role("planner")) == 1, "a configuration error is not retried"
