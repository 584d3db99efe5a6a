"""The planner dies mid-run; a supervisor restarts it and the run resumes from KV."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import anyio
import pytest

from protocols import (
    OutcomeRefused,
    PlanApproved,
    PlanAwaitingApproval,
    PlanDecision,
    PlanRejected,
    RunRequest,
    RunStarted,
    StepDispatched,
    StepFinished,
    StepStarted,
    Verb,
)
from runtime.client import decide_plan, submit
from runtime.config import Settings, load_team
from runtime.testing import open_scripted_model_server
from runtime.tools import builtin_tools
from runtime.worker import Supervisor, open_deployment, process_child

from .harness import appears, env_for, following, pid_of, plan_scenario, runner_argv, team_toml
from .tools import kill_test_tools

pytestmark = pytest.mark.anyio


async def test_sigkill_the_planner_the_run_finishes_without_rerunning_steps(
    nats_url: str, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = [
        {"id": 1, "role": "worker", "tool": "echo", "args": {"text": "one"}},
        {"id": 2, "role": "worker", "tool": "gate", "args": {"name": "g"}},
        {"id": 3, "role": "worker", "tool": "echo", "args": {"text": "$1 and $2"}},
    ]
    restarts: list[str] = []
    async with open_scripted_model_server(plan_scenario(plan, "resumed")) as model:
        team_file = tmp_path / "team.toml"
        team_file.write_text(team_toml(model.base_url))
        env = env_for(nats_url, prefix, tmp_path)
        for name, value in env.items():  # the planner process inherits them
            if name.startswith(("PLANCAST", "NATS")):
                monkeypatch.setenv(name, value)
        tools = builtin_tools()
        for tool in kill_test_tools():
            tools.add(tool)
        settings = Settings(nats_url=nats_url, prefix=prefix, ack_wait=1.5, run_lease=1.5)
        supervisor = Supervisor(
            [process_child("planner", runner_argv(team_file, "planner"))],
            on_restart=lambda name, n, err: restarts.append(name),
        )
        async with open_deployment(settings, load_team(team_file), tools,
                                   roles=["worker", "synthesizer"]) as bus, \
                anyio.create_task_group() as tg:
            tg.start_soon(supervisor.run)
            with anyio.fail_after(30):
                accepted = await submit(bus, RunRequest(goal="outlive the planner"), timeout=30)
            async with following(bus, accepted.run_id) as events:
                start = await events.until(lambda e: isinstance(e, RunStarted))
                assert isinstance(start, RunStarted)
                await events.until(lambda e: isinstance(e, StepStarted) and e.step_id == 2)
                await appears(tmp_path / "g.1.started")
                os.kill(pid_of(start.planner), signal.SIGKILL)
                killed_at = time.time()
                (tmp_path / "g.release").touch()
                finished = await events.finished()
            tg.cancel_scope.cancel()
    resumed = [e for e in events.items if e.ts > killed_at]
    assert finished.answer == "resumed" and restarts == ["planner"]
    assert len(events.of(StepDispatched, 1)) == 1 and len(events.of(StepDispatched, 2)) == 1
    assert [e.output for e in events.of(StepFinished, 3)] == ["one and g passed"]
    assert [e.seq for e in events.items] == list(range(1, len(events.items) + 1))
    print(f"\nRECOVERY planner SIGKILL: first event after the kill {resumed[0].ts - killed_at:.2f}s"
          f", run finished {finished.ts - killed_at:.2f}s after it (lease 1.5s)")


async def test_sigkill_the_planner_while_a_plan_awaits_approval(
    nats_url: str, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planner that takes the run over holds the plan again: nothing of it ran, the
    decision on the old plan is refused as stale, approving the new one runs it once."""
    plan = [{"id": 1, "role": "worker", "tool": "echo", "args": {"text": "one"}},
            {"id": 2, "role": "worker", "tool": "echo", "args": {"text": "$1 two"}}]
    async with open_scripted_model_server(plan_scenario(plan, "approved")) as model:
        team_file = tmp_path / "team.toml"
        team_file.write_text(team_toml(model.base_url))
        env = env_for(nats_url, prefix, tmp_path)
        for name, value in env.items():  # the planner process inherits them
            if name.startswith(("PLANCAST", "NATS")):
                monkeypatch.setenv(name, value)
        settings = Settings(nats_url=nats_url, prefix=prefix, ack_wait=1.5, run_lease=1.5)
        supervisor = Supervisor([process_child("planner", runner_argv(team_file, "planner"))])
        async with open_deployment(settings, load_team(team_file), builtin_tools(),
                                   roles=["worker", "synthesizer"]) as bus, \
                anyio.create_task_group() as tg:
            tg.start_soon(supervisor.run)
            with anyio.fail_after(30):
                accepted = await submit(bus, RunRequest(goal="wait for me", review_plan="human"),
                                        timeout=30)
            async with following(bus, accepted.run_id) as events:
                start = await events.until(lambda e: isinstance(e, RunStarted))
                first = await events.until(lambda e: isinstance(e, PlanAwaitingApproval))
                assert isinstance(start, RunStarted) and isinstance(first, PlanAwaitingApproval)
                os.kill(pid_of(start.planner), signal.SIGKILL)
                second = await events.until(
                    lambda e: isinstance(e, PlanAwaitingApproval) and e.seq > first.seq)
                assert isinstance(second, PlanAwaitingApproval)
                await bus.publish_durable(  # a decision on the plan shown before the kill
                    bus.subject(Verb.RESULT, accepted.run_id, "client"),
                    PlanDecision(run_id=accepted.run_id, round=0, digest="0" * 16,
                                 approved=True, by="late"), msg_id=f"{accepted.run_id}/stale")
                await events.until(lambda e: isinstance(e, OutcomeRefused))
                await decide_plan(bus, accepted.run_id, approved=True, by="ada")
                finished = await events.finished()
            tg.cancel_scope.cancel()
    assert finished.answer == "approved"
    dispatched = events.of(StepDispatched)
    assert sorted(e.step_id for e in dispatched) == [1, 2]  # once each, after the approval
    assert all(e.seq > second.seq for e in dispatched)
    assert [e.by for e in events.items if isinstance(e, PlanApproved)] == ["ada"]
    assert any(isinstance(e, PlanRejected) and "held this plan" in e.error
               for e in events.items)
