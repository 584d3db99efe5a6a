"""With ``structured_output`` on, the critic and synthesizer ask for schema-shaped answers."""

from __future__ import annotations

import json

import pytest

from runtime.testing import Rule

from .harness import finish, plan_line, run_team

pytestmark = pytest.mark.anyio


async def test_structured_output_sends_the_answer_schema(nats_url: str, prefix: str) -> None:
    rules = [
        Rule(role="planner", lines=[plan_line(1, role="coder", review=True,
                                              instruction="Print 42 in Python.")]),
        Rule(role="coder", text="print(42)"),
        Rule(role="critic", text=json.dumps({"approved": True, "critique": "prints 42"})),
        finish("done"),
    ]
    roles = {
        "coder": {"model": "scripted", "tools": ["python"]},
        "critic": {"kind": "critic", "model": "scripted", "tools": ["python"],
                   "options": {"structured_output": True}},
        "synthesizer": {"kind": "synthesizer", "model": "scripted",
                        "options": {"structured_output": True}},
    }
    out = await run_team(nats_url, prefix, rules, roles=roles)
    assert out.answer == "done"
    (review,) = out.by_role("critic")
    (synthesis,) = out.by_role("synthesizer")
    verdict_schema = review.body["response_format"]["json_schema"]
    decision_schema = synthesis.body["response_format"]["json_schema"]
    assert verdict_schema["name"] == "VerdictAnswer"
    assert verdict_schema["schema"]["$defs"]["VerdictAnswer"]["required"] == [
        "approved", "critique"]
    assert decision_schema["name"] == "DecisionAnswer"
    assert "response_format" not in out.by_role("coder")[0].body  # off by default
