"""Side effects: every attempt's idempotency key, and steps that must not act twice.

Executors run in real child processes (``tests.durability.runner``) that are killed or
stopped with real signals; the planner and the synthesizer run here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from protocols import (
    RunFailed,
    RunFinished,
    RunRequest,
    StepFailed,
    StepFinished,
    StepStarted,
)
from runtime.bus import Bus
from runtime.client import submit
from runtime.config import Settings, load_team
from runtime.nonces import Nonces
from runtime.testing import Scenario, open_scripted_model_server, parse_scenario
from runtime.tools import builtin_tools
from runtime.worker import open_deployment

from .harness import Events, appears, env_for, following, pid_of, plan_scenario, spawn, stop

pytestmark = pytest.mark.anyio

KEYS = Nonces("")
"""The planners' keys of a deployment without a secret (as the tests' is)."""


def team_toml(base_url: str, worker: str = "") -> str:
    """Planner and synthesizer on the scripted model; a tool-only ``worker`` whose
    ``effect`` tools must not act twice."""
    inline = f'{{ model = "scripted", base_url = "{base_url}" }}'
    return f"""
[roles.planner]
kind = "planner"
model = {inline}

[roles.synthesizer]
kind = "synthesizer"
model = {inline}

[roles.worker]
tools = ["keyed", "effect", "checked_effect", "echo"]
tool_steps_only = true
{worker}

[tools.effect]
effects = "once"

[tools.checked_effect]
effects = "once"

[roles.clerk]
model = {inline}
tools = ["effect"]
effects = "once"

[timeouts]
heartbeat = 30
"""


@dataclass
class Deployment:
    bus: Bus
    test_dir: Path


@asynccontextmanager
async def deployment(tmp_path: Path, nats_url: str, prefix: str, plan: list[dict[str, Any]],
                     *, ack_wait: str = "1.5", worker: str = "", role: str = "worker",
                     scenario: Scenario | None = None) -> AsyncIterator[Deployment]:
    """The planner and synthesizer here, two executors of ``role`` in child processes."""
    async with open_scripted_model_server(scenario or plan_scenario(plan)) as model:
        path = tmp_path / "team.toml"
        path.write_text(team_toml(model.base_url, worker))
        env = {**env_for(nats_url, prefix, tmp_path), "PLANCAST_ACK_WAIT": ack_wait}
        settings = Settings(nats_url=nats_url, prefix=prefix, heartbeat_interval=0.5)
        procs: list[subprocess.Popen[str]] = []
        try:
            async with open_deployment(settings, load_team(path), builtin_tools(),
                                       roles=["planner", "synthesizer"]) as bus:
                procs = [await spawn(path, role, env) for _ in range(2)]
                yield Deployment(bus, tmp_path)
        finally:
            for proc in procs:
                stop(proc)


def keys_seen(path: Path) -> list[tuple[int, int, str]]:
    """(attempt, delivery, key) of every execution of a ``keyed`` step."""
    return [(int(a), int(d), key) for a, d, key in
            (line.split() for line in path.read_text().splitlines())]


async def test_a_tool_sees_one_key_on_both_deliveries_of_an_attempt_and_another_on_a_retry(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    plan = [{"id": 1, "role": "worker", "tool": "keyed",
             "args": {"name": "k", "fail_redelivered": True}}]
    async with deployment(tmp_path, nats_url, prefix, plan) as d:
        accepted = await submit(d.bus, RunRequest(goal="keys"))
        async with following(d.bus, accepted.run_id) as events:
            started = await events.until(lambda e: isinstance(e, StepStarted))
            assert isinstance(started, StepStarted)
            await appears(d.test_dir / "k.1.1.started")
            os.kill(pid_of(started.executor), signal.SIGKILL)  # mid-execution
            await events.finished()
    run_id = accepted.run_id
    seen = keys_seen(d.test_dir / "k.keys")
    first = KEYS.idempotency(run_id, 1, 1)
    # The killed delivery and the redelivery (another executor): one attempt, one key.
    assert [(a, dl) for a, dl, _ in seen] == [(1, 1), (1, 2), (2, 1)], seen
    assert seen[0][2] == seen[1][2] == first
    # Its known failure was retried deliberately: a new action, a new key.
    assert seen[2][2] == KEYS.idempotency(run_id, 1, 2) != first
    [failed] = events.of(StepFailed, 1)
    assert failed.attempt == 1 and failed.will_retry and failed.cause == "error"
    assert events.of(StepFinished, 1)[0].attempt == 2


async def stopped_past_deadline(d: Deployment, name: str) -> tuple[Events, str]:
    """Run one ``once`` step whose first executor is stopped (SIGSTOP) after acting, past
    its deadline; the run's events and the first attempt's key."""
    accepted = await submit(d.bus, RunRequest(goal="act once", max_replans=0))
    async with following(d.bus, accepted.run_id) as events:
        started = await events.until(lambda e: isinstance(e, StepStarted))
        assert isinstance(started, StepStarted)
        await appears(d.test_dir / f"{name}.1.1.started")  # it acted
        stopped = pid_of(started.executor)
        os.kill(stopped, signal.SIGSTOP)
        try:
            await events.until(lambda e: isinstance(e, RunFinished | RunFailed), timeout=90)
        finally:
            (d.test_dir / f"{name}.release").touch()
            os.kill(stopped, signal.SIGCONT)
    events.check()
    return events, KEYS.idempotency(accepted.run_id, 1, 1)


def acts(test_dir: Path) -> list[str]:
    return (test_dir / "effects.txt").read_text().splitlines()


async def test_a_once_step_stopped_past_its_deadline_is_not_run_again(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    plan = [{"id": 1, "role": "worker", "tool": "effect", "args": {"name": "mail"}}]
    async with deployment(tmp_path, nats_url, prefix, plan, ack_wait="30",
                          worker="step_timeout = 2") as d:
        events, key = await stopped_past_deadline(d, "mail")
    assert acts(d.test_dir) == [f"{key} mail acted in attempt 1"]  # once, not again
    timed_out, unknown = events.of(StepFailed, 1)  # (the planner's deadline, or its own)
    assert "timed out" in timed_out.error and timed_out.will_retry and key in timed_out.error
    # The next attempt asked first, and its tool cannot tell: nobody acts again blindly.
    assert unknown.attempt == 2 and unknown.cause == "outcome_unknown"
    assert not unknown.will_retry and key in unknown.error and "person" in unknown.error
    assert not events.of(StepFinished)
    assert isinstance(events.items[-1], RunFailed)


async def test_a_once_step_whose_tool_can_check_takes_the_earlier_output(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    plan = [{"id": 1, "role": "worker", "tool": "checked_effect", "args": {"name": "ticket"}}]
    async with deployment(tmp_path, nats_url, prefix, plan, ack_wait="30",
                          worker="step_timeout = 2") as d:
        events, key = await stopped_past_deadline(d, "ticket")
    assert acts(d.test_dir) == [f"{key} ticket acted in attempt 1"]  # once, not again
    assert (d.test_dir / "checked.txt").read_text().split() == [key]
    [timed_out] = events.of(StepFailed, 1)
    assert "timed out" in timed_out.error and timed_out.will_retry and key in timed_out.error
    [done] = events.of(StepFinished, 1)
    assert done.attempt == 2 and done.output == "ticket acted in attempt 1"
    assert isinstance(events.items[-1], RunFinished)


async def test_a_once_steps_redelivery_after_a_kill_is_not_run_blindly(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    plan = [{"id": 1, "role": "worker", "tool": "effect", "args": {"name": "charge"}}]
    async with deployment(tmp_path, nats_url, prefix, plan) as d:
        accepted = await submit(d.bus, RunRequest(goal="charge once", max_replans=0))
        async with following(d.bus, accepted.run_id) as events:
            started = await events.until(lambda e: isinstance(e, StepStarted))
            assert isinstance(started, StepStarted)
            await appears(d.test_dir / "charge.1.1.started")
            os.kill(pid_of(started.executor), signal.SIGKILL)  # acted, never answered
            await events.until(lambda e: isinstance(e, RunFailed))
    key = KEYS.idempotency(accepted.run_id, 1, 1)
    assert acts(d.test_dir) == [f"{key} charge acted in attempt 1"]
    [unknown] = events.of(StepFailed, 1)
    assert unknown.attempt == 1 and unknown.cause == "outcome_unknown" and key in unknown.error


async def test_an_agent_step_of_a_once_role_is_not_run_again_after_a_kill(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """The role says ``effects = "once"``; its agent step (a model choosing the tool) acts
    and its executor is killed: the redelivery cannot ask a tool whether it was done (an
    agent may have called any of its tools, or none), so it fails ``outcome_unknown``
    without calling the model again."""
    plan = [{"id": 1, "role": "clerk", "instruction": "send the mail once"}]
    scenario = parse_scenario(json.dumps({"rules": [
        {"role": "planner", "lines": [json.dumps(line) for line in plan]},
        {"role": "clerk", "turn": 1,
         "tool_calls": [{"name": "effect", "arguments": {"name": "mail"}}]},
        {"role": "clerk", "text": "mail sent"},
        {"role": "synthesizer", "text": json.dumps({"action": "finish", "answer": "done"})},
    ]}), fmt="json")
    async with deployment(tmp_path, nats_url, prefix, plan, role="clerk",
                          scenario=scenario) as d:
        accepted = await submit(d.bus, RunRequest(goal="mail once", max_replans=0))
        async with following(d.bus, accepted.run_id) as events:
            await appears(d.test_dir / "mail.1.1.started")  # the agent's tool acted
            os.kill(int((d.test_dir / "mail.1.1.started").read_text()), signal.SIGKILL)
            await events.until(lambda e: isinstance(e, RunFailed))
    key = KEYS.idempotency(accepted.run_id, 1, 1)
    assert acts(d.test_dir) == [f"{key} mail acted in attempt 1"]
    [unknown] = events.of(StepFailed, 1)
    assert unknown.attempt == 1 and unknown.cause == "outcome_unknown" and key in unknown.error
    assert "an agent step cannot be checked" in unknown.error
