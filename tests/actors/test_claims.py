"""A step that ends before its claim is due claims it in its result (one message, not two);
a longer one is claimed while it runs. Either way the run's events say who started it
before it finished, and a result's claim counts only for the attempt it is for."""

from __future__ import annotations

import pytest

from protocols import (
    OutcomeRefused,
    StepClaimed,
    StepDispatched,
    StepFailed,
    StepResult,
    StepStarted,
    Verb,
)
from runtime.bus import Bus
from runtime.client import follow
from runtime.testing import Rule

from .harness import NONCES, echo, finish, plan_line, run_team

pytestmark = pytest.mark.anyio


async def test_a_quick_step_claims_in_its_result(nats_url: str, prefix: str) -> None:
    seen: list[object] = []
    out = await run_team(nats_url, prefix, [
        Rule(role="planner", lines=[echo(1, "hello")]), finish("done")],
        settings={"claim_after": 60.0},  # however slow the machine, it ends before
        outcomes=seen)
    [started] = out.of(StepStarted)
    finished = out.finished(1)
    assert out.seq(StepStarted) < out.seq(type(finished))
    assert started.executor == finished.executor and started.attempt == 1
    results = [m for m in seen if isinstance(m, StepResult)]
    assert [r.claims for r in results] == [True]
    assert not [m for m in seen if isinstance(m, StepClaimed)]
    assert out.answer == "done"


async def test_a_longer_step_is_claimed_while_it_runs(nats_url: str, prefix: str) -> None:
    seen: list[object] = []
    out = await run_team(nats_url, prefix, [
        Rule(role="planner", lines=[plan_line(1, tool="sleep", args={"seconds": 1})]),
        finish("done")], settings={"claim_after": 0.0},
        outcomes=seen)
    assert len(out.of(StepStarted)) == 1
    assert out.seq(StepStarted) < out.seq(type(out.finished(1)))
    assert [type(m) for m in seen][:2] == [StepClaimed, StepResult]
    assert not [m for m in seen if isinstance(m, StepResult) and m.claims]


async def test_a_result_claiming_an_attempt_no_longer_wanted_changes_nothing(
    nats_url: str, prefix: str
) -> None:
    async def forge(bus: Bus, run_id: str) -> None:
        async for event in follow(bus, run_id):
            if isinstance(event, StepStarted):
                await bus.publish_durable(
                    bus.subject(Verb.RESULT, run_id, "worker"),
                    StepResult(run_id=run_id, step_id=1, attempt=2, ok=True, output="forged",
                               executor="worker/elsewhere", delivery=1, claims=True,
                               nonce=NONCES.task(run_id, 1, 2)))
                return

    out = await run_team(nats_url, prefix, [
        Rule(role="planner", lines=[plan_line(1, tool="sleep", args={"seconds": 2})]),
        finish("real")], during=forge)
    [refused] = out.of(OutcomeRefused)
    assert "attempt 2 of step 1 is no longer wanted" in refused.reason
    assert [s.executor for s in out.of(StepStarted)] == [out.finished(1).executor]
    assert out.finished(1).output != "forged" and out.answer == "real"


async def test_a_result_refused_for_want_of_a_claim_is_followed_by_a_claim_or_a_retry(
    nats_url: str, prefix: str
) -> None:
    """A result from a process that never claimed the attempt, while nobody has, is refused
    and its message acknowledged: if no claim follows within ``[timeouts] claim`` the
    attempt fails ``not_claimed`` and runs again, rather than waiting on an answer that
    cannot come (chaos seed 43: such a run waited through 19 takeovers)."""
    async def forge(bus: Bus, run_id: str) -> None:
        async for event in follow(bus, run_id):
            if isinstance(event, StepDispatched):
                await bus.publish_durable(
                    bus.subject(Verb.RESULT, run_id, "worker"),
                    StepResult(run_id=run_id, step_id=1, attempt=1, ok=True, output="forged",
                               executor="worker/elsewhere", delivery=1, claims=False,
                               nonce=NONCES.task(run_id, 1, 1)))
                return

    out = await run_team(nats_url, prefix, [
        Rule(role="planner", lines=[plan_line(1, tool="sleep", args={"seconds": 8})]),
        finish("real")], during=forge, timeouts={"claim": 1.0},
        # the real executor claims only in its result, its heartbeats listing the step
        settings={"claim_after": 60.0, "heartbeat_interval": 0.2})
    refused = [r.reason for r in out.of(OutcomeRefused) if r.sender == "worker/elsewhere"]
    assert ["never claimed attempt 1 of step 1" in r for r in refused] == [True]
    [failed] = out.of(StepFailed)
    assert failed.cause == "not_claimed" and failed.attempt == 1 and failed.will_retry
    assert "a result of attempt 1 came" in failed.error
    assert out.finished(1).attempt == 2 and out.answer == "real"
