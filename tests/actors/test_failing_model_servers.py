"""A failing model server ends the run at once, for what it is (issue 29, items 7, 8, 10).

Each server is real HTTP spoken to by the real openai client: the scripted model answering
HTTP 500 to every call, one that takes a request and never answers, one refusing the
request's structured-output dialect, and one run as a separate process and killed while
the synthesizer waits on it.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import msgspec
import pytest

from protocols import WorkFailed
from runtime.bus import Bus
from runtime.testing import Latency, Rejection, Rule, Scenario

from ..subprocesses import PYTHON, ROOT, background, clean_env
from .harness import echo, plan_line, run_team

pytestmark = pytest.mark.anyio

PLAN = Rule(role="planner", lines=[echo(1, "hi")])
BROKEN = "the GPU fell over"
SUPERVISOR = {"supervisor": {"kind": "supervisor"}}
SLOW = {"synthesis": 600.0, "review": 600.0, "plan": 600.0}
"""Deadlines far past the test's guard: a run that waited one out fails the test."""


@pytest.mark.parametrize("roles", [None, SUPERVISOR], ids=["alone", "supervised"])
async def test_a_synthesis_given_up_on_a_failing_server_fails_the_run_at_once(
        nats_url: str, prefix: str, roles: dict[str, object] | None) -> None:
    out = await run_team(nats_url, prefix, [
        PLAN, Rule(role="synthesizer", error=500, error_message=BROKEN)],
        roles=roles, settings={"max_deliver": 2}, timeouts=SLOW)
    given_up = out.first(WorkFailed, lambda e: not e.will_retry)
    assert given_up.work == "synthesis" and BROKEN in given_up.error
    failure = out.failure
    assert (failure.stage, failure.cause) == ("synthesize", "synthesis")
    assert "HTTP 500" in failure.reason and BROKEN in failure.reason, failure.reason
    assert failure.usage.calls == 3  # the plan, and the synthesis's call in each delivery


async def test_a_review_given_up_on_a_failing_server_fails_the_step_at_once(
        nats_url: str, prefix: str) -> None:
    step = plan_line(1, tool="echo", args={"text": "hi"}, review=True, on_failure="abort")
    out = await run_team(nats_url, prefix, [
        Rule(role="planner", lines=[step]),
        Rule(role="critic", error=500, error_message=BROKEN)],
        roles={"critic": {"kind": "critic", "model": "scripted"}},
        settings={"max_deliver": 2}, timeouts=SLOW)
    given_up = out.first(WorkFailed, lambda e: not e.will_retry)
    assert given_up.work == "review" and given_up.step_id == 1
    failure = out.failure
    assert failure.cause == "step_failed"
    assert "HTTP 500" in failure.reason and BROKEN in failure.reason, failure.reason
    assert failure.usage.calls == 3  # the plan, and the review's call in each delivery


async def test_a_server_killed_mid_run_fails_the_run_once_its_synthesis_is_given_up(
        nats_url: str, prefix: str) -> None:
    scenario = Scenario(rules=[
        PLAN, Rule(role="synthesizer", name="synthesis", text="never sent",
                   latency=Latency(ttft=600.0))])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scenario.json"
        path.write_bytes(msgspec.json.encode(scenario))
        async with background(f"{PYTHON} -m runtime.testing.scripted_model {path} --port 0",
                              cwd=ROOT, env=clean_env()) as server:
            url = re.findall(r"http://\S+/v1", await server.says("OpenAI-compatible API"))[0]

            async def kill_once_asked(bus: Bus, run_id: str) -> None:
                await server.says("rule #1 synthesis", 60.0)  # the synthesizer's call is in flight
                server.process.kill()

            out = await run_team(nats_url, prefix, [], model_url=url, during=kill_once_asked,
                                 settings={"max_deliver": 2}, timeouts=SLOW)
    failure = out.failure
    assert (failure.stage, failure.cause) == ("synthesize", "synthesis")
    assert url in failure.reason and "cannot reach" in failure.reason, failure.reason


async def test_a_server_that_never_answers_is_a_model_failure_asked_once(
        nats_url: str, prefix: str) -> None:
    out = await run_team(nats_url, prefix, [Rule(role="planner", silent=True)],
                         model={"first_byte_timeout": 1.0, "max_retries": 2}, timeouts=SLOW)
    failure = out.failure
    assert (failure.stage, failure.cause) == ("plan", "model"), failure.reason
    assert "preset 'scripted'" in failure.reason and "first_byte_timeout" in failure.reason
    assert "http://127.0.0.1:" in failure.reason and "invalid" not in failure.reason
    assert len(out.by_role("planner")) == 1  # the same dead server is not asked again
    assert failure.usage.calls == 1


async def test_a_refused_dialect_is_sent_once_and_counted(nats_url: str, prefix: str) -> None:
    out = await run_team(nats_url, prefix, [PLAN],
                         rejects=[Rejection(constraint="json_schema", status=500)],
                         model={"structured": "json_schema", "max_retries": 2})
    failure = out.failure
    assert (failure.stage, failure.cause) == ("plan", "config"), failure.reason
    assert "structured = 'json_schema'" in failure.reason
    assert len(out.by_role("planner")) == 1  # not the openai client's three
    assert failure.usage.calls == 1
