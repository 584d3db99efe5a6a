"""A planner's model that streams garbage: the run fails with one line saying so, and the
planner goes on serving runs (real nats-server, a raw SSE server over real HTTP)."""

from __future__ import annotations

import json

import anyio
import pytest

from protocols import RunFailed, RunRequest
from runtime.client import follow, submit
from runtime.config import Settings
from runtime.tools import builtin_tools
from runtime.worker import open_deployment

from ..runtime.test_llm_sse import RawServer, event, serve_raw
from .harness import RUN_TIMEOUT, check_sequence, echo, make_team

pytestmark = pytest.mark.anyio

BROKEN = {
    "malformed": ([event(echo(1, "one") + "\n"), b"data: {not json\n\n"], "malformed chunk"),
    "error object": ([event(echo(1, "one") + "\n"), b"data: " + json.dumps(
        {"error": {"message": "model overloaded"}}).encode() + b"\n\n"], "model overloaded"),
}


@pytest.mark.parametrize("case", list(BROKEN))
async def test_a_broken_plan_stream_fails_the_run_and_the_planner_lives_on(
        nats_url: str, prefix: str, case: str) -> None:
    pieces, says = BROKEN[case]
    async with serve_raw(RawServer(pieces)) as base_url:
        team = make_team(base_url)
        config = Settings(nats_url=nats_url, prefix=prefix)
        async with open_deployment(config, team, builtin_tools(plugins=False)) as bus:
            for _ in range(2):  # the second run is served by the same planner
                accepted = await submit(bus, RunRequest(goal="g"))
                with anyio.fail_after(RUN_TIMEOUT):
                    events = [e async for e in follow(bus, accepted.run_id)]
                check_sequence(events)
                failed = events[-1]
                assert isinstance(failed, RunFailed), events
                assert failed.cause == "model" and failed.stage == "plan"
                assert says in failed.reason and "scripted-model" in failed.reason
                assert "\n" not in failed.reason
                assert failed.usage.calls >= 1
