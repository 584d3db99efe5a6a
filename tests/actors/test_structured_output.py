"""The critic and synthesizer ask for schema-shaped answers in their server's dialect."""

from __future__ import annotations

import json
from typing import Any

import pytest

from protocols import WorkFailed
from runtime.testing import Rejection, Rule

from ..needs import BWRAP
from ..runtime.gbnf_check import parse_gbnf
from .harness import finish, run_team

pytestmark = [pytest.mark.anyio, BWRAP]  # the critic runs the coder's code

STEP = '{"id": 1, "role": "coder", "instruction": "Print 42 in Python.", "review": true}'
RULES = [
    Rule(role="planner", any_contains='{"steps": [...]}', text=f'{{"steps": [{STEP}]}}'),
    Rule(role="planner", lines=[STEP]),
    Rule(role="coder", text="print(42)"),
    Rule(role="critic", text=json.dumps({"approved": True, "critique": "prints 42"})),
    finish("done"),
]
ROLES: dict[str, Any] = {
    "coder": {"model": "scripted", "tools": ["python"]},
    "critic": {"kind": "critic", "model": "scripted", "tools": ["python"]},
}


async def test_json_schema_sends_strict_answer_schemas(nats_url: str, prefix: str) -> None:
    out = await run_team(nats_url, prefix, RULES, roles=ROLES,
                         model={"structured": "json_schema"})
    assert out.answer == "done"
    (review,) = out.by_role("critic")
    (synthesis,) = out.by_role("synthesizer")
    verdict = review.body["response_format"]["json_schema"]
    decision = synthesis.body["response_format"]["json_schema"]
    assert verdict["name"] == "VerdictAnswer" and verdict["strict"] is True
    assert verdict["schema"]["required"] == ["approved", "critique"]
    assert decision["name"] == "DecisionAnswer" and decision["strict"] is True
    # strict mode: every property required, the optional ones nullable
    assert decision["schema"]["required"] == ["action", "answer", "reason"]
    assert {"type": "null"} in decision["schema"]["properties"]["answer"]["anyOf"]
    assert "response_format" not in out.by_role("coder")[0].body  # executors answer freely


async def test_json_object_schema_sends_the_schema_in_json_object(
        nats_url: str, prefix: str) -> None:
    out = await run_team(nats_url, prefix, RULES, roles=ROLES,
                         model={"structured": "json_object_schema"})
    assert out.answer == "done"
    (synthesis,) = out.by_role("synthesizer")
    form = synthesis.body["response_format"]
    assert form["type"] == "json_object"
    assert form["schema"]["required"] == ["action"]  # not strict: optional stays optional


async def test_grammar_sends_gbnf_of_the_answer(nats_url: str, prefix: str) -> None:
    out = await run_team(nats_url, prefix, RULES, roles=ROLES, model={"structured": "grammar"})
    assert out.answer == "done"
    (review,) = out.by_role("critic")
    (synthesis,) = out.by_role("synthesizer")
    assert "response_format" not in review.body
    verdict = parse_gbnf(review.constraint)
    assert verdict.matches('{"approved": true, "critique": "prints 42"}')
    assert not verdict.matches('{"approved": "yes", "critique": "prints 42"}')
    decision = parse_gbnf(synthesis.constraint)
    assert decision.matches('{"action": "finish", "answer": "42"}')
    assert decision.matches('{"action":"replan","reason":"more"}')
    assert not decision.matches('{"action": "stop"}')


async def test_vllm_sends_structured_outputs(nats_url: str, prefix: str) -> None:
    out = await run_team(nats_url, prefix, RULES, roles=ROLES, model={"structured": "vllm"})
    assert out.answer == "done"
    (synthesis,) = out.by_role("synthesizer")
    assert synthesis.body["structured_outputs"]["json"]["required"] == ["action"]
    (plan,) = out.by_role("planner")
    assert parse_gbnf(plan.body["structured_outputs"]["grammar"]).matches(STEP + "\n")


async def test_off_sends_no_constraint(nats_url: str, prefix: str) -> None:
    out = await run_team(nats_url, prefix, RULES, roles=ROLES)
    assert out.answer == "done"
    assert all(r.constraint_kind is None for r in out.requests)


LLAMA_CPP_PYTHON = Rejection(constraint="json_schema", status=500)
"""llama-cpp-python's server: 500 "Input should be 'text' or 'json_object'"."""


@pytest.mark.parametrize("role", ["critic", "synthesizer"])
async def test_a_refused_answer_constraint_fails_the_run_once(
        nats_url: str, prefix: str, role: str) -> None:
    roles = {**ROLES, role: {**ROLES.get(role, {"kind": role}), "model": "strict"}}
    out = await run_team(nats_url, prefix, RULES, roles=roles, rejects=[LLAMA_CPP_PYTHON],
                         presets={"strict": {"structured": "json_schema"}})

    failure = out.failure
    assert failure.cause == "config", out.summary()
    assert "model preset 'strict'" in failure.reason
    assert "does not speak structured = 'json_schema'" in failure.reason
    assert "'json_object_schema' or 'grammar'" in failure.reason
    assert "[models.strict]" in failure.reason and "HTTP 500" in failure.reason
    (failed,) = out.of(WorkFailed)  # reported once, not once per delivery
    assert not failed.will_retry and failed.work == ("review" if role == "critic"
                                                     else "synthesis")
    assert len(out.by_role(role)) == 1, "a configuration error is not retried"
    assert [r.status for r in out.by_role(role)] == [500]
