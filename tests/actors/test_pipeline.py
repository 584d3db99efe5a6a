"""The whole pipeline, planner to synthesizer, over a real nats-server and a scripted model.

Each test scripts the model's answers, runs one goal through an in-process team and
asserts on the run's events. Orderings are read from event sequence numbers (the
planner numbers every state change under one lock), never from sleeps or wall-clock
thresholds.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from actors.run import read_tail
from protocols import (
    CriticVerdict,
    PlanFinished,
    PlanRejected,
    PlanStarted,
    ReplanStarted,
    RunEvent,
    RunFinished,
    RunRequest,
    RunStarted,
    StepDispatched,
    StepFailed,
    StepFinished,
    StepPlanned,
    StepReviewing,
    StepStarted,
    UsageRecorded,
)
from runtime.bus import open_bus
from runtime.cli import RunView
from runtime.client import follow, submit
from runtime.config import Settings
from runtime.testing import Latency, Rule, Scenario, open_scripted_model_server
from runtime.tools import builtin_tools
from runtime.worker import open_deployment

from ..needs import BWRAP
from .harness import (
    RUN_TIMEOUT,
    check_sequence,
    echo,
    finish,
    last_user_message,
    make_team,
    plan_line,
    run_team,
)

pytestmark = pytest.mark.anyio

CODER = {"description": "writes Python", "model": "scripted", "tools": ["python"]}
CRITIC = {"kind": "critic", "model": "scripted", "tools": ["python"]}
ASSISTANT = {"description": "answers questions", "model": "scripted"}


# -- streaming dispatch ------------------------------------------------------------------


@pytest.mark.parametrize("stream_plan", [True, False], ids=["streaming", "control-no-streaming"])
async def test_first_step_runs_while_the_plan_is_still_streaming(
    nats_url: str, prefix: str, stream_plan: bool
) -> None:
    """Step 1 is dispatched and started before the plan's last line arrives, and finished
    before the model's stream ends.

    The planner's usage event marks the end of the model's stream (it is recorded when
    the stream closes). The control run (``stream_plan = false``: steps wait for the whole
    plan) shows the assertions can fail: there nothing is dispatched before that mark.
    """
    words = ["one", "two", "three", "four", "five"]
    lines = [*(echo(i, w) for i, w in enumerate(words, 1)), echo(6, "$1 $2 $3 $4 $5")]
    out = await run_team(
        nats_url, prefix,
        [Rule(role="planner", lines=lines, latency=Latency(per_line=0.3)), finish("done")],
        planner_options={"stream_plan": stream_plan},
    )
    assert out.answer == "done"
    assert out.finished(6).output == "one two three four five"
    step1 = lambda e: e.step_id == 1  # noqa: E731
    stream_end = out.seq(UsageRecorded, lambda e: e.source == "planner")
    plan_end = out.first(PlanFinished)
    if stream_plan:
        last_line = out.seq(StepPlanned, lambda e: e.step.id == 6)
        assert out.seq(StepDispatched, step1) < out.seq(StepStarted, step1) < last_line
        assert last_line < stream_end < plan_end.seq
        assert out.seq(StepFinished, step1) < stream_end
        assert out.first(StepStarted, step1).ts < plan_end.ts
    else:
        assert stream_end < out.seq(StepPlanned) < out.seq(StepDispatched, step1)
        assert out.first(StepStarted, step1).ts > out.first(UsageRecorded).ts


# -- a slow branch does not hold up a fast one -------------------------------------------


async def test_fast_branch_finishes_while_a_slow_branch_is_still_running(
    nats_url: str, prefix: str
) -> None:
    """A: a 1.5 s tool step. B: a fast step, then a step that needs it. Join at the end.

    B's second step is dispatched the moment both it is planned and B's first step has
    finished (no other step event comes between), and it finishes before A does; only the join waits
    for A.
    """
    lines = [
        plan_line(1, tool="sleep", args={"seconds": 1.5}, title="A (slow)"),
        echo(2, "b", title="B1"),
        echo(3, "after $2", title="B2"),
        echo(4, "$1 | $3", title="join"),
    ]
    out = await run_team(nats_url, prefix, [Rule(role="planner", lines=lines), finish("ok")])
    assert out.answer == "ok"
    a_done, b1_done, b2_done = out.finished(1), out.finished(2), out.finished(3)
    b2_sent, b2_planned = out.dispatched(3)[0], out.seq(StepPlanned, lambda e: e.step.id == 3)
    between = out.events[max(b1_done.seq, b2_planned):b2_sent.seq - 1]
    assert all(isinstance(e, UsageRecorded) for e in between), (
        "B2 must be dispatched the moment it is planned and B1 has finished")
    assert b2_sent.seq < b2_done.seq < a_done.seq
    assert out.dispatched(4)[0].seq > a_done.seq
    assert out.finished(4).output == "slept 1.5 s | after b"


# -- bad plans ---------------------------------------------------------------------------

GOOD_PLAN = [echo(1, "good")]
BAD_PLANS: dict[str, tuple[list[str], str, dict[str, Any]]] = {
    # name: (the model's bad answer, what the rejection must say, RunRequest fields)
    "not-json": (["here is my plan: step one, then step two"],
                 "plan line 1 is not a valid step", {}),
    "cyclic": ([echo(1, "x", depends_on=[2]), echo(2, "y", depends_on=[1])],
               "makes a cycle 2 -> 1 -> 2", {}),
    "dangling": ([echo(1, "x", depends_on=[9])],
                 "step 1 depends on step 9", {}),
    "unknown-role": ([plan_line(1, role="wizard", tool="echo", args={"text": "x"})],
                     "unknown role 'wizard'; use one of: scribe, worker", {}),
    "unknown-tool": ([plan_line(1, tool="teleport", args={"to": "mars"})],
                     "unknown tool 'teleport'", {}),
    "tool-not-allowed": ([plan_line(1, role="scribe", tool="math", args={"expression": "1"})],
                         "role 'scribe' may not use tool 'math'", {}),
    "too-many-steps": ([echo(1, "a"), echo(2, "b"), echo(3, "c")],
                       "more than 2 steps", {"max_steps": 2}),
}
SCRIBE = {"scribe": {"description": "only echoes", "tools": ["echo"], "tool_steps_only": True}}


@pytest.mark.parametrize("case", sorted(BAD_PLANS))
async def test_bad_plan_is_rejected_and_the_planner_asks_again(
    nats_url: str, prefix: str, case: str
) -> None:
    """The error is a PlanRejected event that says what to fix; the model gets it back.

    The corrected answer is only given when the re-ask carries the rejection, so the run
    can only finish if the error really went back to the model. Nothing of the bad plan
    is dispatched, except (too-many-steps) valid steps that streamed in before the limit
    was hit: those may already be running, the LLMCompiler trade-off, and are kept.
    """
    bad, message, request = BAD_PLANS[case]
    good = bad[:2] if case == "too-many-steps" else GOOD_PLAN
    rules = [
        Rule(role="planner", lines=bad, times=1),
        Rule(role="planner", contains="Your previous plan was rejected", lines=good),
        finish("fixed"),
    ]
    out = await run_team(nats_url, prefix, rules, roles=SCRIBE, request=request)

    assert out.answer == "fixed"
    rejected = out.first(PlanRejected)
    assert len(out.of(PlanRejected)) == 1 and rejected.retrying
    assert message in rejected.error, rejected.error
    assert len(out.of(PlanStarted)) == 2
    re_ask = last_user_message(out.by_role("planner")[1])
    assert rejected.error in re_ask
    if case == "too-many-steps":
        assert {e.step_id for e in out.of(StepDispatched)} == {1, 2}
        assert "2" in rejected.error
        assert out.first(PlanFinished).steps == 2
    else:
        # Every dispatched step was planned by the corrected answer, after the rejection.
        replanned = {e.step.id for e in out.of(StepPlanned) if e.seq > rejected.seq}
        dispatched = out.of(StepDispatched)
        assert dispatched and all(e.seq > rejected.seq for e in dispatched)
        assert {e.step_id for e in dispatched} <= replanned
        assert out.finished(1).output == "good"


@pytest.mark.parametrize("case", sorted(BAD_PLANS))
async def test_only_bad_plans_fail_the_run_after_plan_attempts(
    nats_url: str, prefix: str, case: str
) -> None:
    """A model that never writes a valid plan fails the run cleanly at stage "plan"."""
    bad, message, request = BAD_PLANS[case]
    out = await run_team(nats_url, prefix, [Rule(role="planner", lines=bad), finish("never")],
                         roles=SCRIBE, request=request, plan_attempts=3)
    failure = out.failure
    assert failure.stage == "plan"
    assert "invalid 3 time(s)" in failure.reason and message in failure.reason
    rejections = out.of(PlanRejected)
    assert [r.retrying for r in rejections] == [True, True, False]
    assert len(out.by_role("planner")) == 3
    assert not out.by_role("synthesizer")
    if case == "too-many-steps":
        assert {e.step_id for e in out.of(StepDispatched)} <= {1, 2}
    else:
        assert not out.of(StepDispatched)


# -- the critic --------------------------------------------------------------------------

CODE_STEP = plan_line(1, role="coder", instruction="Write a program that prints 42.",
                      review=True, success_criteria="prints 42")


def _code(source: str) -> str:
    return f"```python\n{source}\n```"


async def _critic_run(nats_url: str, prefix: str, first: str, critic: list[Rule]) -> Any:
    rules = [
        Rule(role="planner", lines=[CODE_STEP]),
        Rule(role="coder", contains="prints 42", times=1, text=_code(first)),
        Rule(role="coder", contains="A critic rejected your previous attempt",
             text=_code("print(42)")),
        *critic,
        finish("it prints 42"),
    ]
    return await run_team(nats_url, prefix, rules, roles={"coder": CODER, "critic": CRITIC})


@BWRAP
async def test_agreeable_critic_is_overruled_by_running_the_code(
    nats_url: str, prefix: str
) -> None:
    """The critic's model approves code that raises; running it turns that into a rejection.

    The step is retried with the critique as feedback, the fixed code is approved (and
    runs), and the run finishes.
    """
    approve = Rule(role="critic", text='{"approved": true, "critique": "looks right"}')
    out = await _critic_run(nats_url, prefix, "print(42 / 0)", [approve])

    assert out.answer == "it prints 42"
    first, second = out.of(CriticVerdict)
    assert (first.attempt, first.approved) == (1, False)
    assert "does not run" in first.critique and "ZeroDivisionError" in first.critique
    failed = out.first(StepFailed)
    assert (failed.attempt, failed.will_retry) == (1, True)
    retry = out.dispatched(1)[1]
    assert retry.attempt == 2 and failed.seq < retry.seq
    feedback = last_user_message(out.by_role("coder")[1])
    assert "does not run" in feedback and "ZeroDivisionError" in feedback
    assert (second.attempt, second.approved) == (2, True)
    done = out.finished(1)
    assert done.attempt == 2 and "print(42)" in done.output and "/ 0" not in done.output
    assert second.seq < done.seq


@BWRAP
async def test_critic_model_rejects_and_the_step_is_redone(nats_url: str, prefix: str) -> None:
    """A rejection by the critic's model sends the step back with its critique."""
    critic = [
        Rule(role="critic", times=1,
             text='{"approved": false, "critique": "it prints 41, not 42"}'),
        Rule(role="critic", text='{"approved": true, "critique": "prints 42"}'),
    ]
    out = await _critic_run(nats_url, prefix, "print(41)", critic)

    assert out.answer == "it prints 42"
    verdicts = [(v.attempt, v.approved, v.critique) for v in out.of(CriticVerdict)]
    assert verdicts == [(1, False, "it prints 41, not 42"), (2, True, "prints 42")]
    assert [e.attempt for e in out.dispatched(1)] == [1, 2]
    assert "it prints 41, not 42" in last_user_message(out.by_role("coder")[1])
    assert "print(42)" in out.finished(1).output
    # Under review is an event of its own, before each verdict; the view keeps the verdict.
    reviewing = out.of(StepReviewing)
    assert [(e.attempt, e.executor.split("/")[0]) for e in reviewing] == [(1, "coder"),
                                                                         (2, "coder")]
    assert all(r.seq < v.seq for r, v in zip(reviewing, out.of(CriticVerdict), strict=True))
    view = RunView(out.run_id)
    for event in out.events:
        view.apply(event)
    assert view.rows[1].state == "done" and view.rows[1].verdict == "✓ approved"


# -- replanning --------------------------------------------------------------------------


async def test_synthesizer_replan_keeps_finished_steps(nats_url: str, prefix: str) -> None:
    """Round 1 builds on round 0's finished step 1 (``$1``), which never runs again."""
    rules = [
        Rule(role="planner", contains="A new plan is needed because",
             lines=[echo(2, "round 1 saw: $1")]),
        Rule(role="planner", lines=[echo(1, "round 0 fact")]),
        Rule(role="synthesizer", times=1,
             text=json.dumps({"action": "replan", "reason": "need a second look"})),
        finish("answer from round 1"),
    ]
    out = await run_team(nats_url, prefix, rules)

    assert out.answer == "answer from round 1"
    replan = out.first(ReplanStarted)
    assert (replan.round, replan.source, replan.reason) == (1, "synthesizer", "need a second look")
    assert len(out.dispatched(1)) == 1, "a finished step must not run again"
    assert out.dispatched(1)[0].seq < replan.seq < out.dispatched(2)[0].seq
    assert out.finished(2).output == "round 1 saw: round 0 fact"
    second_plan = last_user_message(out.by_role("planner")[1])
    assert "round 0 fact" in second_plan and "first step id 2" in second_plan
    final_synthesis = last_user_message(out.by_role("synthesizer")[1])
    assert "round 1 saw: round 0 fact" in final_synthesis


async def test_failing_tool_retries_replans_then_fails_cleanly(
    nats_url: str, prefix: str
) -> None:
    """A step whose tool always fails: step_attempts tries, a replan, then RunFailed."""
    rules = [
        Rule(role="planner", contains="A new plan is needed because",
             lines=[plan_line(2, tool="math", args={"expression": "2 / 0"})]),
        Rule(role="planner", lines=[plan_line(1, tool="math", args={"expression": "1 / 0"})]),
        finish("must not be reached"),
    ]
    out = await run_team(nats_url, prefix, rules, step_attempts=3)

    failure = out.failure
    assert failure.stage == "execute" and "no replans left" in failure.reason
    for step_id in (1, 2):
        fails = [(e.attempt, e.will_retry) for e in out.of(StepFailed) if e.step_id == step_id]
        assert fails == [(1, True), (2, True), (3, False)]
        assert [e.attempt for e in out.dispatched(step_id)] == [1, 2, 3]
    assert all("division by zero" in e.error for e in out.of(StepFailed))
    replan = out.first(ReplanStarted)
    assert replan.round == 1 and "step 1 failed" in replan.reason
    last_fail_1 = out.first(StepFailed, lambda e: e.step_id == 1 and not e.will_retry)
    assert last_fail_1.seq < replan.seq
    assert "first step id 2" in last_user_message(out.by_role("planner")[1])
    assert not out.by_role("synthesizer")


async def test_a_math_syntax_error_is_not_retried_and_the_replan_reads_it(
    nats_url: str, prefix: str
) -> None:
    """The same arguments would fail the same way: one attempt, then the replan, whose
    request names the operator and the fix; the corrected plan finishes the run."""
    rules = [
        Rule(role="planner", contains="A new plan is needed because",
             lines=[plan_line(2, tool="math", args={"expression": "3**2"})]),
        Rule(role="planner", lines=[plan_line(1, tool="math", args={"expression": "3^2"})]),
        finish("9"),
    ]
    out = await run_team(nats_url, prefix, rules, step_attempts=3)

    assert out.answer == "9"
    [failed] = out.of(StepFailed)
    assert (failed.step_id, failed.attempt, failed.will_retry) == (1, 1, False)
    assert "use `**` for powers" in failed.error
    assert len(out.dispatched(1)) == 1
    replan = out.first(ReplanStarted)
    assert "step 1 failed" in replan.reason and "use `**` for powers" in replan.reason
    assert "use `**` for powers" in last_user_message(out.by_role("planner")[1])
    assert out.finished(2).output == "9"


# -- the simplest goal -------------------------------------------------------------------


async def test_one_step_plan_for_a_simple_goal(nats_url: str, prefix: str) -> None:
    """One agent step, then the synthesizer joins its result into the answer."""
    rules = [
        Rule(role="planner", lines=[plan_line(
            1, role="assistant", instruction="Name the capital of France.")]),
        Rule(role="assistant", contains="Name the capital of France.", text="Paris"),
        finish("The capital of France is Paris."),
    ]
    out = await run_team(nats_url, prefix, rules, goal="What is the capital of France?",
                         roles={"assistant": ASSISTANT})

    assert out.answer == "The capital of France is Paris."
    assert out.first(RunStarted).goal == "What is the capital of France?"
    assert list(out.planned()) == [1] and out.first(PlanFinished).steps == 1
    assert out.finished(1).output == "Paris"
    (synthesis,) = out.by_role("synthesizer")
    assert "Paris" in last_user_message(synthesis)
    assert [r.headers["x-plancast-role"] for r in out.requests] == [
        "planner", "assistant", "synthesizer"]


# -- events ------------------------------------------------------------------------------


async def test_live_and_late_subscribers_see_the_same_gap_free_events(
    nats_url: str, prefix: str
) -> None:
    """A subscriber following from before the submit and one arriving on a new connection
    after the whole deployment stopped read the same events, numbered 1..n in order, and
    the stream stores exactly n messages for the run (nothing dropped, nothing twice).
    """
    run_id = f"run-{prefix}"
    fan = [echo(i, f"part {i}") for i in range(1, 7)]
    rules = [Rule(role="planner", lines=[*fan, echo(7, " ".join(f"${i}" for i in range(1, 7)))],
                  latency=Latency(per_line=0.05)),
             finish("joined", latency=Latency(ttft=0.05))]
    settings = Settings(nats_url=nats_url, prefix=prefix)
    live: list[RunEvent] = []
    async with open_scripted_model_server(Scenario(rules=rules)) as model:
        team = make_team(model.base_url)
        async with open_deployment(settings, team, builtin_tools(plugins=False)) as bus:

            async def watch() -> None:
                live.extend([event async for event in follow(bus, run_id)])

            with anyio.fail_after(RUN_TIMEOUT):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(watch)
                    await submit(bus, RunRequest(goal="join six parts", run_id=run_id))

    async with open_bus(settings) as bus:
        with anyio.fail_after(RUN_TIMEOUT):
            late = [event async for event in follow(bus, run_id)]
        stored = [event.seq for event, _ in await read_tail(bus, run_id, 0)]
    check_sequence(live)
    assert late == live
    assert stored == list(range(1, len(live) + 1))  # each stored once (some in batches)
    assert isinstance(live[-1], RunFinished) and live[-1].answer == "joined"
    assert {e.step_id for e in live if isinstance(e, StepFinished)} == set(range(1, 8))
