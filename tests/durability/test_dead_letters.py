"""Work that can never be done becomes a replan, through the supervisor role."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from protocols import ReplanStarted, RunRequest, StepFailed, StepFinished
from runtime.client import submit
from runtime.config import Settings, load_team
from runtime.testing import open_scripted_model_server
from runtime.tools import builtin_tools
from runtime.worker import open_deployment

from .harness import env_for, following, plan_scenario, spawn, stop, team_toml
from .tools import kill_test_tools

pytestmark = pytest.mark.anyio

FALLBACK = [{"id": 2, "role": "local", "tool": "echo", "args": {"text": "plan B"}}]


async def test_a_handler_that_keeps_failing_is_dead_lettered_into_a_replan(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    plan = [{"id": 1, "role": "worker", "tool": "crash", "args": {}}]
    tools = builtin_tools()
    for tool in kill_test_tools():
        tools.add(tool)
    async with open_scripted_model_server(plan_scenario(plan, "recovered", FALLBACK)) as model:
        (tmp_path / "team.toml").write_text(team_toml(model.base_url))
        settings = Settings(nats_url=nats_url, prefix=prefix, max_deliver=2)
        async with open_deployment(settings, load_team(tmp_path / "team.toml"), tools) as bus:
            accepted = await submit(bus, RunRequest(goal="a buggy tool"))
            async with following(bus, accepted.run_id) as events:
                finished = await events.finished()
    [failed] = events.of(StepFailed, 1)
    assert not failed.will_retry and "could not be run" in failed.error
    assert "a bug, not a tool failure" in failed.error
    [replan] = events.of(ReplanStarted)
    assert "step 1 failed" in replan.reason
    assert [e.output for e in events.of(StepFinished, 2)] == ["plan B"]
    assert finished.answer == "recovered"


async def test_executors_that_keep_dying_exhaust_deliveries_into_a_replan(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    plan = [{"id": 1, "role": "worker", "tool": "die", "args": {}}]
    async with open_scripted_model_server(plan_scenario(plan, "recovered", FALLBACK)) as model:
        team_file = tmp_path / "team.toml"
        team_file.write_text(team_toml(model.base_url))
        env = {**env_for(nats_url, prefix, tmp_path), "PLANCAST_MAX_DELIVER": "2"}
        settings = Settings(nats_url=nats_url, prefix=prefix, max_deliver=2, ack_wait=1.5)
        workers: list[subprocess.Popen[str]] = []
        try:
            async with open_deployment(settings, load_team(team_file), builtin_tools(),
                                       roles=["planner", "synthesizer", "local",
                                              "supervisor"]) as bus:
                # Two deliveries kill two workers; the survivor's next pull is what makes
                # JetStream notice that the deliveries ran out (and emit the advisory).
                workers = [await spawn(team_file, "worker", env) for _ in range(3)]
                accepted = await submit(bus, RunRequest(goal="a deadly step"))
                async with following(bus, accepted.run_id) as events:
                    finished = await events.finished()
            codes = [w.poll() for w in workers]
        finally:
            for worker in workers:
                stop(worker)
    assert sorted(code or 0 for code in codes) == [-9, -9, 0]  # two deliveries, two deaths
    [failed] = events.of(StepFailed, 1)
    assert "delivered 2 times without an outcome" in failed.error
    assert finished.answer == "recovered" and os.path.exists(team_file)
