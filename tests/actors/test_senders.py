"""An outcome counts only from the role whose subject it came on, for the run whose subject
it came on: each role's NATS user may publish only on ``result.<run>.<its role>``, and the
planner checks that the message fits (a verdict from the critic, a decision from the
synthesizer, a step's result from the step's role). Anything else is an ``outcome.refused``
event and changes nothing.
"""

from __future__ import annotations

import json

import pytest

from protocols import (
    ActorError,
    OutcomeRefused,
    Step,
    StepFailed,
    StepFinished,
    StepResult,
    StepStarted,
    StepTask,
    SynthesisDecision,
    Verb,
    decode,
)
from runtime.bus import Bus
from runtime.client import follow
from runtime.testing import Latency, Rule

from .harness import NONCES, echo, finish, plan_line, run_team

pytestmark = pytest.mark.anyio


async def test_a_decision_on_an_executors_subject_is_refused(nats_url: str, prefix: str) -> None:
    async def forge(bus: Bus, run_id: str) -> None:
        async for event in follow(bus, run_id):
            if isinstance(event, StepFinished):  # the run now waits for its synthesis
                await bus.publish_durable(bus.subject(Verb.RESULT, run_id, "worker"),
                                          SynthesisDecision(run_id=run_id, round=0,
                                                            action="finish", answer="FORGED"))
                return

    out = await run_team(nats_url, prefix, [
        Rule(role="planner", lines=[echo(1, "one")]),
        Rule(role="synthesizer", latency=Latency(ttft=1.5),
             text=json.dumps({"action": "finish", "answer": "real"}))], during=forge)
    [refused] = out.of(OutcomeRefused)
    assert refused.kind == "synthesis.decision" and refused.sender == "worker"
    assert "only 'synthesizer' may send it" in refused.reason
    assert out.answer == "real"


async def test_a_result_naming_another_run_is_refused(nats_url: str, prefix: str) -> None:
    async def forge(bus: Bus, run_id: str) -> None:
        async for event in follow(bus, run_id):
            if isinstance(event, StepFinished):
                await bus.publish_durable(bus.subject(Verb.RESULT, run_id, "worker"), StepResult(
                    run_id="someone-elses-run", step_id=2, attempt=1, ok=True,
                    output="forged", executor="worker/x", delivery=1))
                return

    out = await run_team(nats_url, prefix, [
        Rule(role="planner", lines=[echo(1, "one")]),
        finish("real", latency=Latency(ttft=1.5))], during=forge)
    [refused] = out.of(OutcomeRefused)
    assert "names run 'someone-elses-run'" in refused.reason
    assert out.answer == "real"


async def test_a_dead_letter_of_another_roles_work_changes_nothing(
    nats_url: str, prefix: str
) -> None:
    """A role gives up only its own work: a step's task in the synthesizer's dead letters
    is reported by the supervisor and fails no step."""
    reports: list[ActorError] = []

    async def forge(bus: Bus, run_id: str) -> None:
        sub = await bus.nc.subscribe(bus.subject(Verb.ERROR, "supervisor"))
        async for event in follow(bus, run_id):
            if isinstance(event, StepStarted):
                await bus.publish_durable(bus.subject(Verb.DEAD, "synthesizer"), StepTask(
                    run_id=run_id, goal="x", attempt=1,
                    step=Step(id=1, role="worker", tool="echo", args={"text": "x"})))
                reports.append(decode((await sub.next_msg(timeout=10)).data, ActorError))
                return

    out = await run_team(nats_url, prefix, [
        Rule(role="planner", lines=[plan_line(1, tool="sleep", args={"seconds": 2})]),
        finish("real")], roles={"supervisor": {"kind": "supervisor"}}, during=forge)
    [report] = reports
    assert "another role" in report.reason
    assert not out.of(StepFailed) and out.answer == "real"


async def test_results_of_a_delivery_or_attempt_nobody_claimed_are_refused(
    nats_url: str, prefix: str
) -> None:
    """The claimant's own name does not make any result count: the delivery and the
    attempt must be the ones it claimed."""
    async def forge(bus: Bus, run_id: str) -> None:
        async for event in follow(bus, run_id):
            if isinstance(event, StepStarted):
                for delivery, attempt in ((event.delivery + 1, 1), (event.delivery, 2)):
                    await bus.publish_durable(
                        bus.subject(Verb.RESULT, run_id, "worker"),
                        StepResult(run_id=run_id, step_id=1, attempt=attempt, ok=True,
                                   output="forged", executor=event.executor,
                                   delivery=delivery, nonce=NONCES.task(run_id, 1, attempt)))
                return

    out = await run_team(nats_url, prefix, [  # the step outlasts the patience for early results
        Rule(role="planner", lines=[plan_line(1, tool="sleep", args={"seconds": 7})]),
        finish("real")], during=forge)
    reasons = sorted(r.reason for r in out.of(OutcomeRefused))
    assert len(reasons) == 2, reasons
    assert "attempt 2 of step 1 is no longer wanted" in reasons[0]
    assert "never claimed attempt 1 of step 1" in reasons[1]
    assert out.finished(1).output != "forged" and out.answer == "real"
