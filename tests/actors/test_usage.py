"""Honest usage: every model call counts, rejected and cut plans included, and a server
that reports no usage gets an estimate labelled as such, never 0.

Against the scripted model over real HTTP; ``stream_usage=False`` plays llama.cpp's
server, which sends no usage in streams.
"""

from __future__ import annotations

import pytest

from protocols import PlanRejected, RunFinished, StepFailed, UsageRecorded
from runtime.config import DEFAULT_MAX_TOKENS
from runtime.testing import Latency, Rule, ScriptedToolCall

from .harness import echo, finish, plan_line, run_team

pytestmark = pytest.mark.anyio

ASSISTANT = {"description": "answers questions", "model": "scripted"}


def planner_usage(events: list[UsageRecorded]) -> list[UsageRecorded]:
    return [e for e in events if e.source == "planner"]


async def test_a_plan_rejected_mid_stream_is_counted(nats_url: str, prefix: str) -> None:
    """The first plan is rejected at its second line, while the model is still writing:
    its call counts (estimated: it was closed before any usage could arrive)."""
    bad = [echo(1, "one"), "this is not a step", echo(2, "two")]
    out = await run_team(nats_url, prefix, [
        Rule(role="planner", lines=bad, times=1, latency=Latency(per_line=0.2)),
        Rule(role="planner", lines=[echo(1, "one"), echo(2, "two $1")]), finish("done")])
    assert out.answer == "done" and len(out.of(PlanRejected)) == 1
    rejected, accepted = planner_usage(out.of(UsageRecorded))
    assert rejected.usage.calls == 1 and rejected.usage.estimated
    assert rejected.usage.prompt_tokens > 0 and rejected.usage.completion_tokens > 0
    assert accepted.usage.calls == 1 and not accepted.usage.estimated  # the server's count
    total = out.first(RunFinished).usage
    assert total.calls == 3 and total.estimated  # both plans and the synthesizer


async def test_a_plan_cut_by_max_tokens_is_counted(nats_url: str, prefix: str) -> None:
    out = await run_team(nats_url, prefix, [
        Rule(role="planner", lines=[echo(1, "one")], finish_reason="length", times=1),
        Rule(role="planner", lines=[echo(1, "one")]), finish("done")])
    assert out.answer == "done"
    assert [e.usage.calls for e in planner_usage(out.of(UsageRecorded))] == [1, 1]


async def test_a_server_without_stream_usage_gets_an_estimate_not_zero(
    nats_url: str, prefix: str
) -> None:
    """No usage in the planner's stream: its tokens are estimated, labelled, and in the
    range of a real tokenizer's count (2 to 6 characters of JSON a token)."""
    lines = [echo(1, "one two three"), echo(2, "four five six $1")]
    out = await run_team(nats_url, prefix,
                         [Rule(role="planner", lines=lines), finish("done")],
                         stream_usage=False)
    assert out.answer == "done"
    [plan] = planner_usage(out.of(UsageRecorded))
    assert plan.usage.estimated and plan.usage.calls == 1
    assert plan.usage.prompt_tokens > 100  # the planner's prompt is long
    written = sum(len(line) + 1 for line in lines)
    assert written / 6 <= plan.usage.completion_tokens <= written / 2
    synthesis = next(e for e in out.of(UsageRecorded) if e.source == "synthesizer")
    assert not synthesis.usage.estimated  # not streamed: the server reported it
    assert out.first(RunFinished).usage.estimated


async def test_each_role_kind_gets_its_default_max_tokens(nats_url: str, prefix: str) -> None:
    """No preset here sets max_tokens: each call carries its role kind's default (a preset's
    own max_tokens wins: tests/runtime/test_llm.py)."""
    roles = {"assistant": ASSISTANT, "critic": {"kind": "critic", "model": "scripted"}}
    out = await run_team(nats_url, prefix, [
        Rule(role="planner", lines=[plan_line(1, "assistant", instruction="hi", review=True)]),
        Rule(role="assistant", text="hello"),
        Rule(role="critic", text='{"approved": true, "critique": "fine"}'),
        finish("done")], roles=roles)
    assert out.answer == "done"
    sent = {role: out.by_role(role)[0].body.get("max_tokens")
            for role in ("planner", "assistant", "critic", "synthesizer")}
    assert sent == {"planner": DEFAULT_MAX_TOKENS["planner"],
                    "assistant": DEFAULT_MAX_TOKENS["executor"],
                    "critic": DEFAULT_MAX_TOKENS["critic"],
                    "synthesizer": DEFAULT_MAX_TOKENS["synthesizer"]}


async def test_an_agent_step_that_fails_after_model_calls_counts_them(
    nats_url: str, prefix: str
) -> None:
    """The model keeps calling a tool past max_tool_rounds: the step fails, and both of
    its model calls are counted (they were lost with the failure before)."""
    looping = {**ASSISTANT, "tools": ["echo"], "max_tool_rounds": 2}
    call = ScriptedToolCall(name="echo", arguments={"text": "again"})
    out = await run_team(nats_url, prefix, [
        Rule(role="planner", lines=[plan_line(1, "assistant", instruction="loop")]),
        Rule(role="assistant", tool_calls=[call]), finish("never")],
        roles={"assistant": looping}, step_attempts=1, request={"max_replans": 0})
    assert "max_tool_rounds" in out.first(StepFailed).error
    [step] = [e for e in out.of(UsageRecorded) if e.source == "step:1"]
    assert step.usage.calls == 2 and step.usage.completion_tokens > 0
