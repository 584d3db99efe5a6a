"""What a plan says about its steps: on_failure (replan, abort, continue), success_criteria
checked by the critic, and a replan told which roles failed so it can move the work."""

from __future__ import annotations

import json

import pytest

from protocols import ReplanStarted, StepFailed, StepFinished, StepReviewing
from runtime.testing import Rule

from .harness import echo, finish, last_user_message, plan_line, run_team

pytestmark = pytest.mark.anyio

BROKEN = {"tool": "math", "args": {"expression": "1 / 0"}}


async def test_a_step_whose_on_failure_is_abort_ends_the_run_at_once(
    nats_url: str, prefix: str
) -> None:
    """It does not wait for step 2, still running."""
    rules = [Rule(role="planner", lines=[plan_line(1, on_failure="abort", **BROKEN),
                                         plan_line(2, tool="sleep", args={"seconds": 2})]),
             finish("must not be reached")]
    out = await run_team(nats_url, prefix, rules, step_attempts=1)
    failure = out.failure
    assert failure.cause == "step_failed" and failure.stage == "execute"
    assert 'step 1 failed and its on_failure is "abort"' in failure.reason
    assert "division by zero" in failure.reason
    assert not out.of(ReplanStarted) and not out.by_role("synthesizer")
    assert out.dispatched(2) and not [e for e in out.of(StepFinished) if e.step_id == 2]


async def test_a_step_whose_on_failure_is_continue_is_left_out_without_a_replan(
    nats_url: str, prefix: str
) -> None:
    """Step 2 needs the failed step 1 and never runs; step 3 does; the synthesizer is told
    both and finishes."""
    rules = [Rule(role="planner", lines=[plan_line(1, on_failure="continue", **BROKEN),
                                         echo(2, "$1"), echo(3, "three")]),
             finish("partial")]
    out = await run_team(nats_url, prefix, rules, step_attempts=1)
    assert out.answer == "partial" and not out.of(ReplanStarted)
    assert [e.step_id for e in out.of(StepFailed)] == [1]
    assert not out.dispatched(2) and out.finished(3).output == "three"
    prompt = last_user_message(out.by_role("synthesizer")[0])
    assert "FAILED" in prompt and "not run: a step it needs failed" in prompt


async def test_success_criteria_send_the_output_to_the_critic(nats_url: str, prefix: str) -> None:
    critic = {"critic": {"kind": "critic", "model": "scripted"}}
    rules = [Rule(role="planner", lines=[echo(1, "42", success_criteria="a whole number")]),
             Rule(role="critic", contains="a whole number", text=json.dumps(
                 {"approved": True, "critique": "it is a whole number"})),
             finish("42")]
    out = await run_team(nats_url, prefix, rules, roles=critic)
    assert out.answer == "42" and [e.step_id for e in out.of(StepReviewing)] == [1]
    assert "Success criteria: a whole number" in last_user_message(out.by_role("critic")[0])


async def test_a_replan_moves_a_failed_step_to_another_role(nats_url: str, prefix: str) -> None:
    """The writer role's model is down: the replan prompt names the role that failed and
    says the work may go elsewhere; the new plan gives it to the backup role."""
    roles = {"writer": {"description": "writes", "model": "scripted"},
             "backup": {"description": "writes too", "model": "scripted"}}
    rules = [
        Rule(role="planner", contains="failed (role writer)",
             lines=[plan_line(2, role="backup", instruction="write a haiku")]),
        Rule(role="planner", lines=[plan_line(1, role="writer", instruction="write a haiku")]),
        Rule(role="writer", error=500, error_message="writer model is down"),
        Rule(role="backup", text="an old pond"),
        finish("an old pond"),
    ]
    out = await run_team(nats_url, prefix, rules, roles=roles, step_attempts=1)
    assert out.answer == "an old pond" and out.finished(2).output == "an old pond"
    replan = out.first(ReplanStarted)
    assert "step 1 failed (role writer)" in replan.reason
    prompt = last_user_message(out.by_role("planner")[1])
    assert "may go to a different role" in prompt and "- backup: writes too" in prompt
