"""Claims and results of one moment go to their run as one ``step.outcomes`` message, and
the planner applies each element as if it had come alone."""

from __future__ import annotations

import pytest

from protocols import OutcomeRefused, StepOutcomes, StepResult, StepStarted, Verb
from runtime.bus import Bus
from runtime.client import follow
from runtime.testing import Rule

from .harness import NONCES, finish, plan_line, run_team

pytestmark = pytest.mark.anyio

WIDE = 24


def _wide_plan(seconds: float) -> Rule:
    return Rule(role="planner", lines=[plan_line(i, tool="sleep", args={"seconds": seconds})
                                       for i in range(1, WIDE + 1)])


async def test_steps_that_end_together_answer_in_one_message(
    nats_url: str, prefix: str
) -> None:
    seen: list[object] = []
    out = await run_team(nats_url, prefix, [_wide_plan(0.2), finish("done")],
                         outcomes=seen)
    batches = [m for m in seen if isinstance(m, StepOutcomes)]
    assert batches, f"every outcome came alone: {[type(m).__name__ for m in seen]}"
    assert max(len(b.outcomes) for b in batches) > 1
    members = [o for m in seen for o in (m.outcomes if isinstance(m, StepOutcomes) else [m])]
    results = [o for o in members if isinstance(o, StepResult)]
    assert sorted(r.step_id for r in results) == list(range(1, WIDE + 1))
    for step_id in range(1, WIDE + 1):  # each claimed once, before its result, by its sender
        [started] = [s for s in out.of(StepStarted) if s.step_id == step_id]
        assert out.seq(StepStarted, lambda s, i=step_id: s.step_id == i) \
            < out.seq(type(out.finished(step_id)), lambda f, i=step_id: f.step_id == i)
        assert started.executor == out.finished(step_id).executor
        assert out.finished(step_id).output == "slept 0.2 s"
    assert not out.of(OutcomeRefused)
    assert out.answer == "done"


async def test_outcome_batch_1_sends_every_outcome_alone(nats_url: str, prefix: str) -> None:
    seen: list[object] = []
    out = await run_team(nats_url, prefix, [_wide_plan(0.05), finish("done")],
                         settings={"outcome_batch": 1},
                         outcomes=seen)
    assert not [m for m in seen if isinstance(m, StepOutcomes)]
    assert sorted(m.step_id for m in seen if isinstance(m, StepResult)) \
        == list(range(1, WIDE + 1))
    assert out.answer == "done"


async def test_each_element_of_a_batch_is_judged_on_its_own(nats_url: str, prefix: str) -> None:
    """A forged batch on the worker's subject: an element naming another run and one for an
    attempt not wanted are refused, each saying why; the real result still counts."""
    async def forge(bus: Bus, run_id: str) -> None:
        async for event in follow(bus, run_id):
            if isinstance(event, StepStarted):
                forged = StepResult(run_id=run_id, step_id=1, attempt=2, ok=True,
                                    output="forged", executor="worker/elsewhere", delivery=1,
                                    claims=True, nonce=NONCES.task(run_id, 1, 2))
                await bus.publish_durable(
                    bus.subject(Verb.RESULT, run_id, "worker"),
                    StepOutcomes(run_id=run_id, outcomes=[
                        forged, StepResult(run_id="run-000000000000", step_id=1, attempt=1,
                                           ok=True, output="elsewhere",
                                           executor="worker/elsewhere", delivery=1)]))
                return

    out = await run_team(nats_url, prefix, [
        Rule(role="planner", lines=[plan_line(1, tool="sleep", args={"seconds": 2})]),
        finish("real")], settings={"claim_after": 0.0}, during=forge)
    reasons = sorted(r.reason for r in out.of(OutcomeRefused))
    assert len(reasons) == 2, reasons
    assert any("it names run 'run-000000000000'" in r for r in reasons), reasons
    assert any("attempt 2 of step 1 is no longer wanted" in r for r in reasons), reasons
    assert out.finished(1).output.startswith("slept") and out.answer == "real"
