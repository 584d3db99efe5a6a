"""Work that goes silent still ends: a worker that acknowledges a task and never answers,
an executor frozen mid-step, a server that stops answering the planner, a planner killed
while its plan is still streaming. Real processes, real signals, real nats-servers."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import msgspec
import pytest

from protocols import (
    OutcomeRefused,
    RunFailed,
    RunRequest,
    RunResumed,
    RunStarted,
    StepDispatched,
    StepFailed,
    StepFinished,
    StepPlanned,
    StepStarted,
)
from runtime.bus import NatsServerProcess
from runtime.client import submit
from runtime.config import Settings, load_team
from runtime.testing import Latency, open_scripted_model_server, parse_scenario
from runtime.tools import builtin_tools
from runtime.worker import Supervisor, open_deployment, process_child

from .harness import (
    ROOT,
    appears,
    env_for,
    following,
    pid_of,
    plan_scenario,
    runner_argv,
    spawn,
    stop,
    team_toml,
)
from .tools import kill_test_tools

pytestmark = pytest.mark.anyio


def team_file(tmp_path: Path, base_url: str, policy: str = "", timeouts: str = "") -> Path:
    path = tmp_path / "team.toml"
    path.write_text(f"{policy}\n{team_toml(base_url)}\n[timeouts]\n{timeouts}\n")
    return path


async def test_a_worker_that_acks_and_never_answers_times_the_attempt_out(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    plan = [{"id": 1, "role": "worker", "tool": "echo", "args": {"text": "hello"}}]
    async with open_scripted_model_server(plan_scenario(plan)) as model:
        team = load_team(team_file(tmp_path, model.base_url, "step_attempts = 1",
                                   "step = 1.5"))
        settings = Settings(nats_url=nats_url, prefix=prefix)
        silent = subprocess.Popen(
            [sys.executable, "-m", "tests.durability.silent_worker", "worker"],
            env=env_for(nats_url, prefix, tmp_path), cwd=ROOT, stdout=subprocess.PIPE,
            text=True)
        try:
            assert silent.stdout is not None
            async with open_deployment(settings, team, builtin_tools(),
                                       roles=["planner", "synthesizer"]) as bus:
                with anyio.fail_after(30):
                    ready = await anyio.to_thread.run_sync(silent.stdout.readline)
                assert ready.startswith("READY")
                accepted = await submit(bus, RunRequest(goal="ask the silent one",
                                                        max_replans=0))
                async with following(bus, accepted.run_id) as events:
                    failed = await events.until(lambda e: isinstance(e, RunFailed))
        finally:
            stop(silent)
    [started] = events.of(StepStarted)
    assert started.executor == "worker/silent"
    [timed_out] = events.of(StepFailed)
    assert timed_out.cause == "timeout" and "1.5s start-to-close timeout" in timed_out.error
    assert isinstance(failed, RunFailed) and "timed out" in failed.reason


async def test_an_executor_frozen_mid_step_is_given_up_by_heartbeat(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """Its heartbeats stop long before the ack wait (30 s) would redeliver the task."""
    plan = [{"id": 1, "role": "worker", "tool": "gate", "args": {"name": "frozen"}}]
    async with open_scripted_model_server(plan_scenario(plan, "thawed")) as model:
        path = team_file(tmp_path, model.base_url, timeouts="heartbeat = 2")
        env = {**env_for(nats_url, prefix, tmp_path), "PLANCAST_ACK_WAIT": "30"}
        settings = Settings(nats_url=nats_url, prefix=prefix, heartbeat_interval=0.5)
        workers: list[subprocess.Popen[str]] = []
        try:
            async with open_deployment(settings, load_team(path), builtin_tools(),
                                       roles=["planner", "synthesizer"]) as bus:
                workers = [await spawn(path, "worker", env) for _ in range(2)]
                accepted = await submit(bus, RunRequest(goal="freeze one"))
                async with following(bus, accepted.run_id) as events:
                    first = await events.until(lambda e: isinstance(e, StepStarted))
                    assert isinstance(first, StepStarted)
                    await appears(tmp_path / "frozen.1.started")
                    frozen = pid_of(first.executor)
                    os.kill(frozen, signal.SIGSTOP)
                    stopped_at = time.time()
                    try:
                        gave_up = await events.until(lambda e: isinstance(e, StepFailed))
                        (tmp_path / "frozen.release").touch()
                        finished = await events.finished()
                    finally:
                        os.kill(frozen, signal.SIGCONT)
        finally:
            for worker in workers:
                stop(worker)
    assert isinstance(gave_up, StepFailed) and gave_up.cause == "heartbeat"
    assert gave_up.will_retry and first.executor in gave_up.error
    [done] = events.of(StepFinished)
    assert done.attempt == 2 and pid_of(done.executor) != frozen
    assert finished.answer == "thawed"
    print(f"\nRECOVERY executor SIGSTOP, heartbeat timeout 2s: step given up "
          f"{gave_up.ts - stopped_at:.2f}s after the stop")


async def test_a_planner_whose_server_stops_answering_keeps_its_runs(
    fresh_nats_server: NatsServerProcess, prefix: str, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    plan = [{"id": 1, "role": "worker", "tool": "sleep", "args": {"seconds": 2}},
            {"id": 2, "role": "worker", "tool": "echo", "args": {"text": "after $1"}}]
    async with open_scripted_model_server(plan_scenario(plan, "kept")) as model:
        path = team_file(tmp_path, model.base_url)
        settings = Settings(nats_url=fresh_nats_server.url, prefix=prefix, run_lease=30.0)
        async with open_deployment(settings, load_team(path), builtin_tools()) as bus:
            accepted = await submit(bus, RunRequest(goal="outlast a frozen server"))
            async with following(bus, accepted.run_id) as events:
                await events.until(lambda e: isinstance(e, StepStarted))
                with caplog.at_level(logging.INFO):
                    os.kill(fresh_nats_server.pid, signal.SIGSTOP)
                    try:
                        await anyio.sleep(7)  # longer than a JetStream request's timeout
                    finally:
                        os.kill(fresh_nats_server.pid, signal.SIGCONT)
                    finished = await events.finished()
    timeouts = [r for r in caplog.records if "timeout" in r.getMessage().lower()]
    assert timeouts, "the server's silence never reached the actors"
    assert finished.answer == "kept" and not events.of(RunResumed)
    assert events.of(StepFinished, 2)[0].output.startswith("after ")
    assert len(events.of(StepDispatched, 1)) == 1


async def test_a_planner_killed_while_its_plan_streams_is_resumed_not_restarted(
    nats_url: str, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = [{"id": i, "role": "worker", "tool": "echo", "args": {"text": f"s{i}"}}
             for i in range(1, 6)]
    lines.append({"id": 6, "role": "worker", "tool": "echo",
                  "args": {"text": " ".join(f"${i}" for i in range(1, 6))}})
    scenario = plan_scenario(lines, "resumed")
    scenario = parse_scenario(scenario_json(scenario, per_line=0.6), fmt="json")
    restarts: list[str] = []
    async with open_scripted_model_server(scenario) as model:
        path = team_file(tmp_path, model.base_url)
        env = env_for(nats_url, prefix, tmp_path)
        for name, value in env.items():
            if name.startswith(("PLANCAST", "NATS")):
                monkeypatch.setenv(name, value)
        tools = builtin_tools()
        for tool in kill_test_tools():
            tools.add(tool)
        settings = Settings(nats_url=nats_url, prefix=prefix, ack_wait=1.5, run_lease=1.5)
        supervisor = Supervisor([process_child("planner", runner_argv(path, "planner"))],
                                on_restart=lambda name, n, err: restarts.append(name))
        async with open_deployment(settings, load_team(path), tools,
                                   roles=["worker", "synthesizer"]) as bus, \
                anyio.create_task_group() as tg:
            tg.start_soon(supervisor.run)
            accepted = await submit(bus, RunRequest(goal="plan slowly"), timeout=30)
            async with following(bus, accepted.run_id) as events:
                start = await events.until(lambda e: isinstance(e, RunStarted))
                second = await events.until(
                    lambda e: isinstance(e, StepPlanned) and e.step.id == 2)
                assert isinstance(start, RunStarted)
                os.kill(pid_of(start.planner), signal.SIGKILL)
                finished = await events.finished()
            tg.cancel_scope.cancel()
    assert restarts == ["planner"] and second.seq < events.of(RunResumed)[0].seq
    planned = [e.step.id for e in events.of(StepPlanned)]
    assert sorted(planned) == list(range(1, 7)) and len(set(planned)) == 6
    for sid in range(1, 7):
        assert len(events.of(StepDispatched, sid)) == 1, f"step {sid} dispatched again"
    assert events.of(StepFinished, 6)[0].output == "s1 s2 s3 s4 s5"
    assert finished.answer == "resumed" and not events.of(OutcomeRefused)


def scenario_json(scenario: object, *, per_line: float) -> str:
    """The scenario with the planner's lines paced ``per_line`` seconds apart."""
    data = msgspec.to_builtins(scenario)
    for rule in data["rules"]:
        if rule.get("role") == "planner":
            rule["latency"] = msgspec.to_builtins(Latency(per_line=per_line))
    return msgspec.json.encode(data).decode()
