"""Approval gates: a step of a role with ``approval``, or one that calls (or may call) a
tool in ``approve_tools``, waits for a person before each attempt; nothing else waits."""

from __future__ import annotations

import pytest

from actors.run import why_gated
from protocols import (
    ReplanStarted,
    Step,
    StepApproved,
    StepAwaitingApproval,
    StepFailed,
    StepFinished,
)
from runtime.bus import Bus
from runtime.client import decide_step, follow
from runtime.testing import Rule

from .harness import echo, finish, make_team, plan_line, run_team

pytestmark = pytest.mark.anyio


async def _gate(bus: Bus, run_id: str, nth: int = 1) -> StepAwaitingApproval:
    async for event in follow(bus, run_id):
        if isinstance(event, StepAwaitingApproval):
            nth -= 1
            if nth == 0:
                return event
    raise AssertionError("the run ended with no step awaiting approval")


async def test_a_gate_holds_exactly_its_step(nats_url: str, prefix: str) -> None:
    """Steps 1 and 3 run and finish while step 2 (math, in approve_tools) waits."""
    async def approve_after_the_others(bus: Bus, run_id: str) -> None:
        gate = await _gate(bus, run_id)
        assert (gate.step_id, gate.attempt) == (2, 1) and "math" in gate.reason
        async for event in follow(bus, run_id):
            if isinstance(event, StepFinished) and event.step_id == 3:
                break
        await decide_step(bus, run_id, 2, approved=True, by="ada")

    rules = [Rule(role="planner", lines=[
        echo(1, "one"), plan_line(2, tool="math", args={"expression": "6*7"}), echo(3, "$1!")]),
        finish("42")]
    out = await run_team(nats_url, prefix, rules, approve_tools=["math"],
                         during=approve_after_the_others)
    assert out.answer == "42"
    assert [e.step_id for e in out.of(StepAwaitingApproval)] == [2]
    approved = out.first(StepApproved)
    assert approved.by == "ada" and out.finished(3).seq < approved.seq
    assert out.dispatched(2)[0].seq > approved.seq and out.finished(2).output == "42"


async def test_a_rejected_step_fails_and_the_run_replans(nats_url: str, prefix: str) -> None:
    roles = {"deployer": {"description": "deploys", "tools": ["echo"],
                          "tool_steps_only": True, "approval": True}}

    async def reject(bus: Bus, run_id: str) -> None:
        await _gate(bus, run_id)
        await decide_step(bus, run_id, 1, approved=False, reason="not on a Friday", by="ada")

    rules = [Rule(role="planner", contains="not on a Friday", lines=[echo(2, "wait")]),
             Rule(role="planner", lines=[echo(1, "deploy", role="deployer")]),
             finish("waited")]
    out = await run_team(nats_url, prefix, rules, roles=roles, during=reject)
    failed = out.first(StepFailed)
    assert (failed.step_id, failed.cause, failed.will_retry) == (1, "declined", False)
    assert failed.error == "rejected by ada: not on a Friday"
    assert not out.dispatched(1) and out.first(ReplanStarted).round == 1
    assert out.answer == "waited"


async def test_each_attempt_is_approved_anew_and_a_closed_gate_times_out(
    nats_url: str, prefix: str
) -> None:
    """Attempt 1 is approved and fails; attempt 2 waits at the gate again, nobody answers,
    and it fails with the approval timeout's reason."""
    async def approve_once(bus: Bus, run_id: str) -> None:
        await _gate(bus, run_id)
        await decide_step(bus, run_id, 1, approved=True, by="ada")

    rules = [Rule(role="planner", lines=[plan_line(1, tool="math", args={"expression": "1/0"},
                                                   on_failure="continue")]),
             finish("gave up")]
    out = await run_team(nats_url, prefix, rules, approve_tools=["math"], during=approve_once,
                         timeouts={"approval": 1.0})
    assert [(e.attempt) for e in out.of(StepAwaitingApproval)] == [1, 2]
    first, second = out.of(StepFailed)
    assert (first.attempt, first.cause, first.will_retry) == (1, "error", True)
    assert (second.attempt, second.cause) == (2, "approval")
    assert "[timeouts] approval" in second.error and "--step 1" in second.error
    assert [e.attempt for e in out.dispatched(1)] == [1]
    assert out.answer == "gave up"


def test_which_steps_are_gated() -> None:
    team = make_team("http://127.0.0.1:9/v1", {
        "ops": {"description": "x", "model": "scripted", "tools": ["python", "echo"]},
        "boss": {"description": "x", "model": "scripted", "approval": True}},
        approve_tools=["python"])

    def step(**fields: object) -> Step:
        return Step(id=1, **fields)  # type: ignore[arg-type]

    assert why_gated(team, step(role="ops", tool="echo", args={})) == ""
    assert "calls python" in why_gated(team, step(role="ops", tool="python", args={}))
    assert "may call python" in why_gated(team, step(role="ops", instruction="x"))
    assert why_gated(team, step(role="ops", instruction="x", tools=["echo"])) == ""
    assert "approval = true" in why_gated(team, step(role="boss", instruction="x"))
