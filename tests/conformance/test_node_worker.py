"""A role written in JavaScript from docs/wire.md alone, with the official NATS packages,
served as its own NATS user beside the Python planner and synthesizer: its claims and
results count, and an output too large for a message travels by reference.

Without Node.js it skips, naming the package (``tests.needs``); the packages are installed
from ``package-lock.json`` on first use (``npm ci``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from protocols import OutcomeRefused, RunFinished, RunRequest, StepFinished, StepStarted
from runtime.bus import open_bus
from runtime.client import follow, submit
from runtime.config import team_from_dict
from runtime.testing import Rule, Scenario, open_scripted_model_server

from ..actors.harness import finish, plan_line
from ..needs import NODE
from ..secured import Secured, secured_server
from . import nats_js

pytestmark = [pytest.mark.anyio, NODE]

HERE = Path(__file__).parent
BIG = 700_000
"""Characters of the big output: more than a message may carry (512 KiB)."""


@pytest.fixture
async def secured(tmp_path: Path, prefix: str) -> AsyncIterator[Secured]:
    plan = [plan_line(1, role="jsworker", tool="shout", args={"text": "hello"}),
            plan_line(2, role="jsworker", tool="big", args={"size": BIG}),
            plan_line(3, role="jsworker", tool="shout", args={"text": "$2"})]
    async with open_scripted_model_server(Scenario(rules=[
            Rule(role="planner", lines=plan), finish("done")])) as model:
        team = team_from_dict({
            "models": {"m": {"model": "scripted", "base_url": model.base_url,
                             "max_retries": 0}},
            "roles": {"planner": {"kind": "planner", "model": "m"},
                      "jsworker": {"tools": ["shout", "big"], "tool_steps_only": True},
                      "synthesizer": {"kind": "synthesizer", "model": "m"}}})
        async with secured_server(tmp_path, prefix, team) as s:
            yield s


async def test_a_javascript_worker_serves_a_role_from_the_spec_alone(
    secured: Secured, tmp_path: Path
) -> None:
    node = nats_js()
    log = tmp_path / "worker.log"
    user = secured.user("jsworker")
    env = {**os.environ, "NATS_URL": secured.server.url, "PLANCAST_PREFIX": secured.prefix,
           "ROLE": "jsworker", "NATS_USER": user["user"], "NATS_PASSWORD": user["password"]}
    with log.open("wb") as out:
        worker = await anyio.open_process([node, str(HERE / "worker.mjs")], env=env,
                                          stdout=out, stderr=out)
    try:
        async with secured.serving(["planner", "synthesizer"]), \
                open_bus(secured.settings("client")) as client:
            accepted = await submit(client, RunRequest(goal="shout"))
            events = []
            with anyio.move_on_after(60):
                async for event in follow(client, accepted.run_id):
                    events.append(event)
    finally:
        if worker.returncode is None:
            worker.terminate()
            with anyio.move_on_after(10):
                await worker.wait()
        if worker.returncode is None:
            worker.kill()
    assert worker.returncode == 0, log.read_text()
    assert events and isinstance(events[-1], RunFinished), "\n".join(map(repr, events))
    finished = {e.step_id: e for e in events if isinstance(e, StepFinished)}
    started = [e for e in events if isinstance(e, StepStarted)]
    assert not [e for e in events if isinstance(e, OutcomeRefused)], events
    assert finished[1].output == "HELLO"
    assert finished[2].output.startswith("x" * 4000) and finished[2].output.endswith("…")
    assert finished[3].output.startswith("X" * 4000)  # $2 reached it whole, uppercased
    assert {e.executor.partition("/")[0] for e in started} == {"jsworker"}
    assert "violation" not in secured.server.log_tail(400).lower()
