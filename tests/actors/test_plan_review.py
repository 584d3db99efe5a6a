"""Plan review: a reviewed round runs nothing until it is decided on; approve, edit,
reject (the model writes it again with the reason), a deadline, and the critic deciding
against a policy."""

from __future__ import annotations

import json

import msgspec
import pytest

from protocols import (
    OutcomeRefused,
    PlanApproved,
    PlanAwaitingApproval,
    PlanRejected,
    RunEvent,
    RunRequest,
    Step,
    StepDispatched,
)
from runtime.bus import Bus, open_bus
from runtime.client import RunRefused, decide_plan, follow, submit
from runtime.config import Settings
from runtime.testing import Rule, Scenario, open_scripted_model_server
from runtime.tools import builtin_tools
from runtime.worker import open_deployment

from .harness import echo, finish, last_user_message, make_team, run_team

pytestmark = pytest.mark.anyio

PLAN = [echo(1, "one"), echo(2, "$1 two")]
HUMAN = {"review_plan": "human"}


async def _awaiting(bus: Bus, run_id: str, nth: int = 1) -> tuple[PlanAwaitingApproval,
                                                                  list[RunEvent]]:
    """The nth plan awaiting approval, and every event before it."""
    seen: list[RunEvent] = []
    async for event in follow(bus, run_id):
        if isinstance(event, PlanAwaitingApproval):
            nth -= 1
            if nth == 0:
                return event, seen
        seen.append(event)
    raise AssertionError(f"the run ended without plan {nth} awaiting approval: {seen}")


async def test_a_reviewed_run_dispatches_nothing_until_approved(
    nats_url: str, prefix: str
) -> None:
    async def approve(bus: Bus, run_id: str) -> None:
        awaiting, before = await _awaiting(bus, run_id)
        assert not [e for e in before if isinstance(e, StepDispatched)]
        assert [s.id for s in awaiting.steps] == [1, 2] and awaiting.reviewer == "human"
        await decide_plan(bus, run_id, approved=True, by="ada")

    out = await run_team(nats_url, prefix, [Rule(role="planner", lines=PLAN), finish("done")],
                         request=HUMAN, during=approve)
    assert out.answer == "done"
    approved = out.first(PlanApproved)
    assert approved.by == "ada" and not approved.edited
    assert all(e.seq > approved.seq for e in out.of(StepDispatched))
    assert out.finished(2).output == "one two"


async def test_an_edited_plan_runs_with_the_edit(nats_url: str, prefix: str) -> None:
    """The reviewer changes step 1's arguments and adds a step 3; the run does exactly that,
    and the event says what changed."""
    async def edit(bus: Bus, run_id: str) -> None:
        awaiting, _ = await _awaiting(bus, run_id)
        steps = [msgspec.structs.replace(awaiting.steps[0], args={"text": "uno"}),
                 awaiting.steps[1], msgspec.json.decode(echo(3, "$2 three"), type=Step)]
        await decide_plan(bus, run_id, approved=True, steps=steps, by="ada")

    out = await run_team(nats_url, prefix, [Rule(role="planner", lines=PLAN), finish("done")],
                         request=HUMAN, during=edit)
    approved = out.first(PlanApproved)
    assert approved.edited and approved.changes == "step 1: args; step 3 added"
    assert out.finished(2).output == "uno two" and out.finished(3).output == "uno two three"


async def test_a_rejected_plan_is_replanned_with_the_reason(nats_url: str, prefix: str) -> None:
    async def reject_then_approve(bus: Bus, run_id: str) -> None:
        await _awaiting(bus, run_id)
        await decide_plan(bus, run_id, approved=False, reason="say hello instead", by="ada")
        second, _ = await _awaiting(bus, run_id, nth=2)
        assert [s.args for s in second.steps] == [{"text": "hello"}]
        await decide_plan(bus, run_id, approved=True, by="ada")

    rules = [Rule(role="planner", contains="say hello instead", lines=[echo(1, "hello")]),
             Rule(role="planner", lines=PLAN), finish("hello")]
    out = await run_team(nats_url, prefix, rules, request=HUMAN, during=reject_then_approve)
    rejected = out.first(PlanRejected)
    assert rejected.error == "the plan was rejected by ada: say hello instead"
    assert rejected.retrying
    assert "say hello instead" in last_user_message(out.by_role("planner")[1])
    assert {e.step_id for e in out.of(StepDispatched)} == {1}
    assert out.finished(1).output == "hello"


async def test_nobody_deciding_in_time_ends_the_run_with_the_reason(
    nats_url: str, prefix: str
) -> None:
    out = await run_team(nats_url, prefix, [Rule(role="planner", lines=PLAN), finish("x")],
                         request=HUMAN, timeouts={"approval": 0.5})
    failure = out.failure
    assert failure.cause == "approval" and "[timeouts] approval" in failure.reason
    assert "plancast plan approve" in failure.reason
    assert not out.of(StepDispatched)


async def test_an_invalid_edit_or_a_stale_decision_is_refused_and_the_plan_still_waits(
    nats_url: str, prefix: str
) -> None:
    async def meddle(bus: Bus, run_id: str) -> None:
        awaiting, _ = await _awaiting(bus, run_id)
        ghost = msgspec.structs.replace(awaiting.steps[0], role="ghost")
        await decide_plan(bus, run_id, approved=True, steps=[ghost, awaiting.steps[1]],
                          by="mallory")
        async for event in follow(bus, run_id):
            if isinstance(event, OutcomeRefused):
                break
        await decide_plan(bus, run_id, approved=True, by="ada")

    out = await run_team(nats_url, prefix, [Rule(role="planner", lines=PLAN), finish("done")],
                         request=HUMAN, during=meddle)
    refused = out.first(OutcomeRefused)
    assert refused.kind == "plan.decision" and refused.sender == "mallory"
    assert "the edited plan is invalid" in refused.reason and "ghost" in refused.reason
    assert out.first(PlanApproved).by == "ada" and out.answer == "done"


CRITIC = {"critic": {"kind": "critic", "model": "scripted"}}
POLICY = "No step may use the sleep tool."


async def test_auto_review_rejects_a_plan_that_breaks_its_policy(
    nats_url: str, prefix: str
) -> None:
    """The critic gets the plan and the policy; its rejection sends the plan back to the
    planner's model, whose second plan it approves."""
    sleepy = [echo(1, "one"), echo(2, "$1"), json.dumps(
        {"id": 3, "role": "worker", "tool": "sleep", "args": {"seconds": 0.1}})]
    rules = [
        Rule(role="planner", contains="uses the sleep tool", lines=PLAN),
        Rule(role="planner", lines=sleepy),
        Rule(role="critic", contains='"tool":"sleep"', text=json.dumps(
            {"approved": False, "critique": "step 3 uses the sleep tool"})),
        Rule(role="critic", contains=POLICY, text=json.dumps(
            {"approved": True, "critique": "keeps the policy"})),
        finish("done"),
    ]
    out = await run_team(nats_url, prefix, rules, roles=CRITIC, review_plan="auto",
                         plan_policy=POLICY)
    assert out.answer == "done"
    rejected = out.first(PlanRejected)
    assert rejected.error.startswith("the plan was rejected by critic/")
    assert rejected.error.endswith("step 3 uses the sleep tool")
    assert out.first(PlanApproved).by.startswith("critic/")
    assert [e.reviewer for e in out.of(PlanAwaitingApproval)] == ["auto", "auto"]
    assert all(POLICY in last_user_message(r) for r in out.by_role("critic"))
    assert 3 not in {e.step_id for e in out.of(StepDispatched)}


@pytest.mark.parametrize(("team_mode", "asked", "granted"), [
    ("human", "off", False), ("human", "auto", False), ("human", "human", True),
    ("auto", "off", False), ("auto", "human", False), ("off", "human", True)])
async def test_a_run_request_cannot_drop_or_change_the_review_its_team_requires(
    nats_url: str, prefix: str, team_mode: str, asked: str, granted: bool
) -> None:
    """A client on NATS (its own connection, as ``plancast run`` or the gateway) asking for
    less review, or another reviewer, than the team file says is refused with a reason that
    says what to do; a team with no review lets the run ask for one."""
    rules = [Rule(role="planner", lines=PLAN), finish("done")]
    async with open_scripted_model_server(Scenario(rules=rules)) as model:
        team = make_team(model.base_url, CRITIC, review_plan=team_mode)
        settings = Settings(nats_url=nats_url, prefix=prefix)
        async with open_deployment(settings, team, builtin_tools(plugins=False)), \
                open_bus(settings, ensure_streams=False) as client:
            request = RunRequest(goal="greet", review_plan=asked)  # type: ignore[arg-type]
            if not granted:
                with pytest.raises(RunRefused) as refused:
                    await submit(client, request)
                assert f"review_plan = {team_mode!r} in its team file" in str(refused.value)
                assert "leave review_plan out of the request" in str(refused.value)
                return
            accepted = await submit(client, request)
            awaiting, _ = await _awaiting(client, accepted.run_id)
            assert awaiting.reviewer == asked
