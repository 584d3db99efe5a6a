"""An attempt its planner gives up is stopped where it runs (``StepStop``): the run was
cancelled or failed, the attempt ran out of time, or a replan dropped it. Its executor, a
real child process, cancels the execution, answers nothing, and serves on."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from actors import InHand
from protocols import (
    RunFailed,
    RunRequest,
    Step,
    StepFinished,
    StepStop,
    StepTask,
)
from runtime.client import cancel, submit
from runtime.config import Settings, load_team
from runtime.testing import open_scripted_model_server
from runtime.tools import builtin_tools
from runtime.worker import open_deployment

from .harness import appears, env_for, following, plan_scenario, spawn, stop, team_toml

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("effects", ["default", "none"])
async def test_a_cancelled_runs_running_step_is_stopped_and_its_executor_serves_on(
    nats_url: str, prefix: str, tmp_path: Path, effects: str
) -> None:
    """The run is cancelled while its one executor (one slot) waits inside step 1: the
    step is cancelled there, its run says nothing more of it, and the next run's step gets
    the slot. Before, the step ran on until its tool returned, holding the slot (and a
    step whose tool says ``effects = "none"``, which records nothing, was not stopped)."""
    plan = [{"id": 1, "role": "worker", "tool": "gate", "args": {"name": "g"}}]
    async with open_scripted_model_server(plan_scenario(plan)) as model:
        team_file = tmp_path / "team.toml"
        team_file.write_text(team_toml(model.base_url) + (
            f'\n[tools.gate]\neffects = "{effects}"\n' if effects != "default" else ""))
        settings = Settings(nats_url=nats_url, prefix=prefix, heartbeat_interval=0.5)
        worker = await spawn(team_file, "worker", env_for(nats_url, prefix, tmp_path))
        try:
            async with open_deployment(settings, load_team(team_file), builtin_tools(),
                                       roles=["planner", "synthesizer"]) as bus:
                first = await submit(bus, RunRequest(goal="given up"))
                async with following(bus, first.run_id) as events:
                    await appears(tmp_path / "g.1.started")
                    await cancel(bus, first.run_id, "no longer needed", source="a test")
                    await events.until(lambda e: isinstance(e, RunFailed))
                    await appears(tmp_path / "g.1.stopped")  # cancelled inside the tool
                (tmp_path / "g.release").touch()  # a step that waited would pass now
                second = await submit(bus, RunRequest(goal="after it"))
                async with following(bus, second.run_id) as after:
                    finished = await after.finished()
        finally:
            stop(worker)
    assert not events.of(StepFinished)
    assert isinstance(events.items[-1], RunFailed)
    assert [e.output for e in after.of(StepFinished, 1)] == ["g passed"]
    assert finished.answer == "all done"


async def test_a_stop_counts_only_with_its_attempts_nonce() -> None:
    """Only the task's sender and receivers know the nonce: a stop without it (from
    anyone who may publish there by mistake) changes nothing."""
    task = StepTask(run_id="r1", goal="g", step=Step(id=2, role="worker", tool="echo"),
                    attempt=3, nonce="the-nonce")
    hand = InHand()
    running = hand.start(task)
    running.scope = anyio.CancelScope()
    assert not hand.stop(StepStop(run_id="r1", step_id=2, attempt=3, nonce="forged"))
    assert not hand.stop(StepStop(run_id="r1", step_id=2, attempt=2, nonce="the-nonce"))
    assert not running.scope.cancel_called and not running.stopped
    assert hand.stop(StepStop(run_id="r1", step_id=2, attempt=3, reason="cancelled",
                              nonce="the-nonce"))
    assert running.scope.cancel_called and running.stopped == "cancelled"
