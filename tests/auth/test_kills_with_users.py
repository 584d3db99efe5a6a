"""The kill tests' promises hold with one NATS user per role: an executor killed mid-step
and the planner that owns the run, both SIGKILLed, and the run finishes, each step once."""

from __future__ import annotations

import os
import signal
import subprocess
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from protocols import RunRequest, RunStarted, StepDispatched, StepFinished, StepStarted
from runtime.bus import open_bus
from runtime.client import submit
from runtime.config import load_team
from runtime.testing import open_scripted_model_server
from runtime.tools import builtin_tools
from runtime.worker import open_deployment

from ..durability.harness import (
    FAST,
    appears,
    env_for,
    following,
    pid_of,
    plan_scenario,
    spawn,
    stop,
    team_toml,
)
from ..secured import secured_server

pytestmark = pytest.mark.anyio


async def test_an_executor_and_the_planner_die_mid_run_with_one_user_per_role(
    tmp_path: Path, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in FAST.items():  # the admin provisions consumers with these too
        monkeypatch.setenv(name, value)
    plan = [{"id": 1, "role": "worker", "tool": "gate", "args": {"name": "a"}},
            {"id": 2, "role": "worker", "tool": "echo", "args": {"text": "after $1"}}]
    async with open_scripted_model_server(plan_scenario(plan, "survived")) as model:
        team_file = tmp_path / "team.toml"
        team_file.write_text(team_toml(model.base_url))
        team = load_team(team_file)
        async with secured_server(tmp_path, prefix, team) as s, AsyncExitStack() as stack:
            def env(user: str) -> dict[str, str]:
                return {**env_for(s.server.url, prefix, tmp_path),
                        "NATS_CREDS": str(s.path(user))}

            procs: list[subprocess.Popen[str]] = []
            stack.callback(lambda: list(map(stop, procs)))
            for user in ("planner", "planner", "worker", "worker"):
                procs.append(await spawn(team_file, user, env(user)))
            await stack.enter_async_context(open_deployment(
                s.settings("synthesizer"), team, builtin_tools(plugins=False),
                roles=["synthesizer"]))
            client = await stack.enter_async_context(open_bus(s.settings("client")))
            accepted = await submit(client, RunRequest(goal="outlive two kills"), timeout=30)
            async with following(client, accepted.run_id) as events:
                start = await events.until(lambda e: isinstance(e, RunStarted))
                started = await events.until(
                    lambda e: isinstance(e, StepStarted) and e.step_id == 1)
                assert isinstance(start, RunStarted) and isinstance(started, StepStarted)
                await appears(tmp_path / "a.1.started")
                os.kill(pid_of(started.executor), signal.SIGKILL)
                os.kill(pid_of(start.planner), signal.SIGKILL)
                finished = await events.finished()
    [done] = events.of(StepFinished, 1)
    assert pid_of(done.executor) != pid_of(started.executor)
    assert [e.output for e in events.of(StepFinished, 2)] == ["after a passed"]
    assert len(events.of(StepDispatched, 2)) == 1
    assert finished.answer == "survived"
    assert "violation" not in s.server.log_tail(400).lower()
