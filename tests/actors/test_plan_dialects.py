"""The planner's model is constrained per request, in the dialect its preset names.

The scripted model server records the constraint each request carried, so these tests
check what a real server would have been told: a replan's grammar starts at the next id
and lets it build on the finished steps; only the team's role/tool pairs are named.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from protocols import (
    PlanRejected,
    ReplanStarted,
    StepDispatched,
    StepFinished,
    StepPlanned,
    StepStarted,
    UsageRecorded,
)
from runtime.testing import Latency, Rejection, Rule

from ..runtime.gbnf_check import parse_gbnf
from .harness import echo, finish, last_user_message, plan_line, run_team

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


def steps_object(*lines: str) -> list[str]:
    """A ``{"steps": [...]}`` answer written one step per streamed line."""
    return ['{"steps": [', *(f"{line}," for line in lines[:-1]), lines[-1], "]}"]


@pytest.mark.parametrize("dialect", ["json_schema", "json_object_schema"])
async def test_schema_dialects_dispatch_each_step_as_it_closes(
        nats_url: str, prefix: str, dialect: str) -> None:
    """The steps array streams: step 1 runs before the model has written the last step."""
    words = ["one", "two", "three", "four"]
    lines = [*(echo(i, w) for i, w in enumerate(words, 1)), echo(5, "$1 $2 $3 $4")]
    rules = [Rule(role="planner", lines=steps_object(*lines), latency=Latency(per_line=0.3)),
             finish("done")]
    out = await run_team(nats_url, prefix, rules, model={"structured": dialect})

    assert out.answer == "done"
    assert out.finished(5).output == "one two three four"
    step1 = lambda e: e.step_id == 1  # noqa: E731
    last_step = out.seq(StepPlanned, lambda e: e.step.id == 5)
    stream_end = out.seq(UsageRecorded, lambda e: e.source == "planner")
    assert out.seq(StepDispatched, step1) < out.seq(StepStarted, step1) < last_step
    assert out.seq(StepFinished, step1) < stream_end
    (request,) = out.by_role("planner")
    assert '{"steps": [...]}' in last_user_message(request)
    assert request.constraint["$defs"]["step_id"]["enum"][0] == 1


async def test_a_replans_schema_starts_at_the_next_id(nats_url: str, prefix: str) -> None:
    rules = [
        Rule(role="planner", contains="A new plan is needed because",
             lines=steps_object(echo(3, "round 1 saw: $1"))),
        Rule(role="planner", lines=steps_object(echo(1, "round 0 fact"), echo(2, "also $1"))),
        Rule(role="synthesizer", times=1,
             text=json.dumps({"action": "replan", "reason": "need a second look"})),
        finish("answer from round 1"),
    ]
    out = await run_team(nats_url, prefix, rules, model={"structured": "json_schema"})

    assert out.answer == "answer from round 1"
    assert out.finished(3).output == "round 1 saw: round 0 fact"
    defs = out.by_role("planner")[1].constraint["$defs"]
    assert defs["step_id"]["enum"][0] == 3
    assert defs["dependency"]["enum"][:3] == [1, 2, 3]


async def test_a_steps_answer_that_is_not_a_step_is_rejected_with_the_reason(
        nats_url: str, prefix: str) -> None:
    rules = [Rule(role="planner", times=1, text='{"steps": [{"id": 1, "role": "worker"}]}'),
             Rule(role="planner", times=1, text='{"steps": [7]}'),
             Rule(role="planner", text=f'{{"steps": [{echo(1, "ok")}]}}'), finish("done")]
    out = await run_team(nats_url, prefix, rules, model={"structured": "json_object_schema"},
                         plan_attempts=3)

    assert out.answer == "done"
    first, second = (e.error for e in out.of(PlanRejected))
    assert "sets neither `tool` nor `instruction`" in first
    assert second.startswith("step 1 of the steps array is not a valid step")


async def test_a_corrected_plan_continues_after_the_accepted_steps(
        nats_url: str, prefix: str) -> None:
    """Step 1 was accepted (and dispatched) before line 2 broke a rule: the second attempt's
    grammar starts at 2, may build on step 1, and may even add nothing."""
    rules = [
        Rule(role="planner", contains="Your previous plan was rejected",
             lines=[echo(2, "after $1")]),
        Rule(role="planner", lines=[echo(1, "first"), plan_line(2, tool="nope", args={})]),
        finish("done"),
    ]
    out = await run_team(nats_url, prefix, rules, model={"structured": "grammar"})

    assert out.answer == "done"
    assert out.finished(2).output == "after first"
    first, second = (parse_gbnf(r.constraint) for r in out.by_role("planner"))
    assert first.text("root") == "plan-0"
    assert '"{\\"id\\":" sp "2,' in second.text("line-0")
    assert second.literals("ids-0") == ["1"]
    assert second.text("root") == "plan-0?"  # the accepted step may be the whole plan
    assert second.matches('{"id": 2, "role": "worker", "tool": "echo", '
                          '"args": {"text": "after $1"}}\n')


async def test_the_planner_bounds_strings_as_its_option_says(nats_url: str, prefix: str) -> None:
    rules = [Rule(role="planner", lines=[echo(1, "hi")]), finish("done")]
    out = await run_team(nats_url, prefix, rules, model={"structured": "grammar"},
                         planner_options={"plan_text_chars": 5})
    assert out.answer == "done"
    grammar = parse_gbnf(out.by_role("planner")[0].constraint)
    ok = '{"id": 1, "role": "worker", "tool": "echo", "args": {"text": "12345"}}\n'
    assert grammar.matches(ok)
    assert not grammar.matches(ok.replace("12345", "123456"))
