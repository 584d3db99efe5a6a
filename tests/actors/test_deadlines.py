"""Every run ends, with a reason: cut plans, unserved roles, failing models, deadlines,
forged results and replan requests that arrive while the run waits for something else.

Each run goes through a real nats-server and the scripted model over real HTTP; each
test checks the terminal event and the reason a user would read.
"""

from __future__ import annotations

import json

import anyio
import pytest

from protocols import (
    ActorError,
    OutcomeRefused,
    PlanRejected,
    ReplanRequest,
    ReplanStarted,
    RunCancel,
    StepFailed,
    StepFinished,
    StepResult,
    StepStarted,
    Verb,
    WorkFailed,
    decode,
)
from runtime.bus import Bus
from runtime.client import cancel, follow
from runtime.testing import Latency, Rule

from .harness import NONCES, echo, finish, plan_line, run_team

pytestmark = pytest.mark.anyio

FAST = {"unserved": 1.5}
"""Short enough to watch a deadline pass in a test."""


async def test_a_plan_cut_by_max_tokens_is_rejected_and_asked_again(
    nats_url: str, prefix: str
) -> None:
    lines = [echo(1, "one"), echo(2, "two $1")]
    out = await run_team(nats_url, prefix, [
        Rule(role="planner", lines=lines[:1], finish_reason="length", times=1),
        Rule(role="planner", lines=lines), finish("done")])
    [rejected] = out.of(PlanRejected)
    assert "max_tokens" in rejected.error and rejected.retrying
    assert out.answer == "done" and out.finished(2).output == "two one"
    assert len(out.dispatched(1)) == 1  # the step of the cut plan ran once


async def test_a_plan_always_cut_fails_the_run_naming_max_tokens(
    nats_url: str, prefix: str
) -> None:
    out = await run_team(nats_url, prefix, [
        Rule(role="planner", lines=[echo(1, "one")], finish_reason="length"), finish("no")])
    assert out.failure.stage == "plan" and "max_tokens" in out.failure.reason


async def test_a_step_whose_role_nobody_serves_fails_saying_how_to_start_it(
    nats_url: str, prefix: str
) -> None:
    coder = {"description": "writes code", "tools": ["echo"], "tool_steps_only": True}
    out = await run_team(
        nats_url, prefix, [Rule(role="planner", lines=[echo(1, "hi", role="coder")]),
                           finish("never")],
        roles={"coder": coder}, serve=["planner", "worker", "synthesizer"],
        timeouts=FAST, request={"max_replans": 0})
    [failed] = out.of(StepFailed)
    assert failed.cause == "unserved" and not failed.will_retry
    assert "role 'coder'" in failed.error and "plancast worker --role coder" in failed.error
    assert "plancast worker --role coder" in out.failure.reason


async def test_a_review_nobody_serves_fails_the_step(nats_url: str, prefix: str) -> None:
    critic = {"kind": "critic", "model": "scripted"}
    out = await run_team(
        nats_url, prefix, [Rule(role="planner", lines=[echo(1, "check me", review=True)]),
                           finish("never")],
        roles={"critic": critic}, serve=["planner", "worker", "synthesizer"],
        timeouts=FAST, request={"max_replans": 0})
    [failed] = out.of(StepFailed)
    assert failed.cause == "unserved" and "critic" in failed.error
    assert out.failure.stage == "execute"


async def test_a_synthesizer_whose_model_always_fails_ends_the_run(
    nats_url: str, prefix: str
) -> None:
    out = await run_team(
        nats_url, prefix, [Rule(role="planner", lines=[echo(1, "fact")]),
                           Rule(role="synthesizer", error=500, error_message="model down")],
        roles={"supervisor": {"kind": "supervisor"}}, settings={"max_deliver": 2})
    failures = out.of(WorkFailed)
    assert [(f.work, f.will_retry) for f in failures] == [("synthesis", True),
                                                          ("synthesis", False)]
    assert all("HTTP 500" in f.error and "model down" in f.error for f in failures)
    assert out.failure.stage == "synthesize" and out.failure.cause == "synthesis"
    assert "HTTP 500" in out.failure.reason


async def test_a_step_past_its_timeout_is_stopped_by_its_executor_saying_why(
    nats_url: str, prefix: str
) -> None:
    """The executor stops the step at its timeout and answers with the reason (the
    planner's own clock waits longer, for that answer); the executor goes on serving."""
    plan = [plan_line(1, tool="sleep", args={"seconds": 30}, timeout=0.5,
                      on_failure="continue"),
            echo(2, "after")]
    out = await run_team(nats_url, prefix, [Rule(role="planner", lines=["\n".join(plan)]),
                                            finish("done")], step_attempts=1)
    assert out.answer == "done"
    failed = out.first(StepFailed, lambda e: e.step_id == 1)
    assert "timed out: the step ran longer than its 0.5s timeout" in failed.error
    assert not failed.will_retry
    assert out.finished(2).output == "after"


async def test_a_run_past_its_deadline_fails_and_its_queued_work_is_dropped(
    nats_url: str, prefix: str
) -> None:
    out = await run_team(
        nats_url, prefix, [Rule(role="planner", lines=[
            plan_line(1, tool="sleep", args={"seconds": 30})]), finish("never")],
        request={"timeout": 1.5}, settings={"drain_timeout": 0.5})
    assert out.failure.cause == "deadline" and "1.5s timeout" in out.failure.reason


async def test_a_result_from_a_sender_that_never_claimed_is_refused_on_the_events(
    nats_url: str, prefix: str
) -> None:
    told: list[ActorError] = []

    async def forge(bus: Bus, run_id: str) -> None:
        sub = await bus.nc.subscribe(bus.subject(Verb.ERROR, "worker"))  # the sender's view
        async for event in follow(bus, run_id):
            if isinstance(event, StepStarted) and event.step_id == 1:
                await bus.publish_durable(bus.subject(Verb.RESULT, run_id, "worker"), StepResult(
                    run_id=run_id, step_id=1, attempt=1, ok=True, output="forged",
                    executor="worker/never-claimed", delivery=1,
                    nonce=NONCES.task(run_id, 1, 1)))
                break
        told.append(decode((await sub.next_msg(timeout=30)).data, ActorError))

    out = await run_team(nats_url, prefix, [  # the step outlasts the patience for early results
        Rule(role="planner", lines=[plan_line(1, tool="sleep", args={"seconds": 5})]),
        finish("real")], during=forge)
    [refused] = out.of(OutcomeRefused)
    assert refused.sender == "worker/never-claimed" and "never claimed" in refused.reason
    [error] = told
    assert error.role == "planner" and "step.result refused" in error.reason
    assert "never claimed" in error.reason and error.subject.endswith(".worker")
    assert out.finished(1).output != "forged" and out.answer == "real"


async def test_a_replan_request_wakes_a_run_waiting_for_its_synthesis(
    nats_url: str, prefix: str
) -> None:
    """The first synthesis is slow; a client's replan request ends that wait, and its
    decision, arriving while the run waits for the second round's, is refused."""
    slow = Rule(role="synthesizer", times=1, latency=Latency(ttft=2.0),
                text=json.dumps({"action": "finish", "answer": "too late"}))
    slower = finish("fresh", latency=Latency(ttft=4.0))

    async def replan(bus: Bus, run_id: str) -> None:
        async for event in follow(bus, run_id):
            if isinstance(event, StepFinished):
                await anyio.sleep(0.5)  # the run now waits for the synthesizer
                await bus.publish_durable(
                    bus.subject(Verb.RESULT, run_id, "client"),
                    ReplanRequest(run_id=run_id, source="client", reason="the goal changed"))
                return

    out = await run_team(nats_url, prefix, [
        Rule(role="planner", contains="A new plan is needed", lines=[echo(2, "round two")]),
        Rule(role="planner", lines=[echo(1, "round one")]), slow, slower],
        during=replan)
    [started] = out.of(ReplanStarted)
    assert started.source == "client" and started.reason == "the goal changed"
    assert out.answer == "fresh"
    [late] = out.of(OutcomeRefused)
    assert late.kind == "synthesis.decision" and late.seq > started.seq
    assert "round 0" in late.reason


async def test_a_client_cancels_a_run_and_its_queued_work_is_dropped(
    nats_url: str, prefix: str
) -> None:
    async def stop(bus: Bus, run_id: str) -> None:
        async for event in follow(bus, run_id):
            if isinstance(event, StepStarted):
                # A role may not cancel (only the client user and supervisors may) ...
                await bus.publish_durable(bus.subject(Verb.RESULT, run_id, "worker"),
                                          RunCancel(run_id=run_id, reason="forged"))
                await cancel(bus, run_id, "enough", source="a test")
                return

    out = await run_team(nats_url, prefix, [
        Rule(role="planner", lines=[plan_line(1, tool="sleep", args={"seconds": 30}),
                                    plan_line(2, tool="sleep", args={"seconds": 30})]),
        finish("never")], during=stop, settings={"drain_timeout": 0.5})
    assert out.failure.cause == "cancelled"
    assert out.failure.reason == "cancelled by a test: enough"
    [refused] = out.of(OutcomeRefused)
    assert refused.kind == "run.cancel" and "'client'" in refused.reason
    assert not out.of(StepFinished)
