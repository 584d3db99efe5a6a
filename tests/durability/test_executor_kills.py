"""Executors die, stall and run long; no accepted step is lost or recorded twice.

Executors run in real child processes (``tests.durability.runner``); the planner and
the synthesizer run here. Each test prints the recovery time it measured.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from nats.js import api

from protocols import (
    ActorError,
    RunRequest,
    StepClaimed,
    StepFinished,
    StepRecord,
    StepResult,
    StepStarted,
    Stream,
    Verb,
    decode,
    stream_name,
    subject,
)
from runtime.bus import Bus
from runtime.client import step_record as client_step_record
from runtime.client import submit
from runtime.config import Settings, load_team
from runtime.testing import open_scripted_model_server
from runtime.tools import builtin_tools
from runtime.worker import open_deployment

from .harness import (
    appears,
    env_for,
    following,
    pid_of,
    plan_scenario,
    spawn,
    stop,
    team_toml,
)

pytestmark = pytest.mark.anyio


@dataclass
class Cluster:
    bus: Bus
    test_dir: Path
    workers: list[subprocess.Popen[str]]


@asynccontextmanager
async def deployment(
    nats_url: str, prefix: str, tmp_path: Path, plan: list[dict[str, Any]], *, workers: int = 2,
    here: tuple[str, ...] = ("planner", "synthesizer"), claim_after: float | None = None,
) -> AsyncIterator[Cluster]:
    """The roles ``here`` in this process, ``workers`` executor processes of role ``worker``
    (``claim_after``: their ``PLANCAST_CLAIM_AFTER``)."""
    async with open_scripted_model_server(plan_scenario(plan)) as model:
        team_file = tmp_path / "team.toml"
        team_file.write_text(team_toml(model.base_url))
        env = env_for(nats_url, prefix, tmp_path)
        if claim_after is not None:
            env["PLANCAST_CLAIM_AFTER"] = str(claim_after)
        settings = Settings(nats_url=nats_url, prefix=prefix, ack_wait=1.5, run_lease=1.5,
                            heartbeat_interval=0.5)
        procs: list[subprocess.Popen[str]] = []
        try:
            async with open_deployment(settings, load_team(team_file), builtin_tools(),
                                       roles=list(here)) as bus:
                for _ in range(workers):
                    procs.append(await spawn(team_file, "worker", env))
                yield Cluster(bus, tmp_path, procs)
        finally:
            for proc in procs:
                stop(proc)


def gate(step_id: int, name: str, **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "role": "worker", "tool": "gate", "args": {"name": name, **extra}}


def echo(step_id: int, text: str) -> dict[str, Any]:
    return {"id": step_id, "role": "worker", "tool": "echo", "args": {"text": text}}


async def step_record(bus: Bus, run_id: str, step_id: int) -> StepRecord:
    """The step's record in the ended run's last state (its own key, or an ``ended``
    entry)."""
    record = await client_step_record(bus, run_id, step_id)
    assert record is not None, f"step {step_id} of run {run_id} has no record"
    return record


async def test_sigkill_mid_step_the_step_completes_on_another_executor(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    plan = [gate(1, "a"), echo(2, "after $1")]
    async with deployment(nats_url, prefix, tmp_path, plan) as d:
        accepted = await submit(d.bus, RunRequest(goal="survive a crash"))
        async with following(d.bus, accepted.run_id) as events:
            started = await events.until(lambda e: isinstance(e, StepStarted) and e.step_id == 1)
            assert isinstance(started, StepStarted)
            victim = pid_of(started.executor)
            await appears(d.test_dir / "a.1.started")
            os.kill(victim, signal.SIGKILL)
            killed_at = time.time()
            finished = await events.finished()
    [done] = events.of(StepFinished, 1)
    assert pid_of(done.executor) != victim and done.output == "a passed"
    assert {e.step_id for e in events.of(StepFinished)} == {1, 2}  # steps lost: 0
    assert events.of(StepFinished, 2)[0].output == "after a passed"
    assert finished.answer == "all done"
    print(f"\nRECOVERY executor SIGKILL: {done.ts - killed_at:.2f}s (ack wait 1.5s)")


async def test_sigkill_before_the_deferred_claim_the_step_completes_on_another_executor(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """An executor claims a step only once it has run ``claim_after`` (its result claims a
    quicker one): killed before that, it never said it held the step, and the step still
    completes on another executor (its task comes again once the ack wait passes)."""
    plan = [gate(1, "a"), echo(2, "after $1")]
    async with deployment(nats_url, prefix, tmp_path, plan, claim_after=60.0) as d:
        accepted = await submit(d.bus, RunRequest(goal="survive a crash before the claim"))
        async with following(d.bus, accepted.run_id) as events:
            await appears(d.test_dir / "a.1.started")
            victim = int((d.test_dir / "a.1.started").read_text())
            os.kill(victim, signal.SIGKILL)
            finished = await events.finished()
    started = events.of(StepStarted, 1)
    assert started and all(pid_of(e.executor) != victim for e in started)  # never claimed
    [done] = events.of(StepFinished, 1)
    assert pid_of(done.executor) != victim and done.output == "a passed"
    assert events.of(StepFinished, 2)[0].output == "after a passed"
    assert finished.answer == "all done"


async def test_side_effect_then_sigkill_is_recorded_once(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    plan = [gate(1, "ledgered", ledger=True), echo(2, "got $1")]
    async with deployment(nats_url, prefix, tmp_path, plan) as d:
        accepted = await submit(d.bus, RunRequest(goal="side effects"))
        async with following(d.bus, accepted.run_id) as events:
            started = await events.until(lambda e: isinstance(e, StepStarted) and e.step_id == 1)
            assert isinstance(started, StepStarted)
            await appears(d.test_dir / "ledgered.1.started")  # the side effect happened
            os.kill(pid_of(started.executor), signal.SIGKILL)  # ... and the ack never will
            killed_at = time.time()
            await events.finished()
        step1 = await step_record(d.bus, accepted.run_id, 1)
    [done] = events.of(StepFinished, 1)
    assert step1.executor == done.executor and step1.status == "done"
    ledger = (d.test_dir / "ledger.txt").read_text().splitlines()
    recorded = (f"{accepted.run_id}/1/{step1.attempt}/{step1.task_seq}/{step1.delivery} "
                f"{step1.executor}")
    assert ledger.count(recorded) == 1, ledger  # once for the recorded outcome
    assert len(ledger) == 2  # the killed execution's effect, and the recorded one
    assert events.of(StepFinished, 2)[0].output == "got ledgered passed"
    print(f"\nRECOVERY executor SIGKILL after side effect: {done.ts - killed_at:.2f}s")


async def test_a_stalled_executors_late_result_is_rejected(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    plan = [gate(1, "stall"), gate(2, "hold", after="$1")]
    here = ("planner", "synthesizer", "supervisor")
    async with deployment(nats_url, prefix, tmp_path, plan, here=here) as d:
        late: list[StepResult] = []
        arrived = anyio.Event()
        silent: list[ActorError] = []
        reported = anyio.Event()

        async def errors(msg: Any) -> None:
            silent.append(decode(msg.data, ActorError))
            reported.set()

        async def watch(msg: Any) -> None:
            message = decode(msg.data, StepResult | StepClaimed)
            if isinstance(message, StepResult) and message.step_id == 1:
                late.append(message)
                if len(late) == 2:
                    arrived.set()

        accepted = await submit(d.bus, RunRequest(goal="stall"))
        results = subject(d.bus.prefix, Verb.RESULT, accepted.run_id, ">", wildcard=True)
        await d.bus.nc.subscribe(results, cb=watch)
        await d.bus.nc.subscribe(d.bus.subject(Verb.ERROR, "supervisor"), cb=errors)
        async with following(d.bus, accepted.run_id) as events:
            started = await events.until(lambda e: isinstance(e, StepStarted) and e.step_id == 1)
            assert isinstance(started, StepStarted)
            stalled = pid_of(started.executor)
            await appears(d.test_dir / "stall.1.started")
            os.kill(stalled, signal.SIGSTOP)
            stopped_at = time.time()
            try:
                done = await events.until(lambda e: isinstance(e, StepFinished) and e.step_id == 1)
                with anyio.fail_after(30):
                    await reported.wait()  # the supervisor noticed the silence
            finally:
                (d.test_dir / "stall.release").touch()
                os.kill(stalled, signal.SIGCONT)
            with anyio.fail_after(30):
                await arrived.wait()  # the stalled executor's result came in, late
            (d.test_dir / "hold.release").touch()
            await events.finished()
        step1 = await step_record(d.bus, accepted.run_id, 1)
    assert isinstance(done, StepFinished) and pid_of(done.executor) != stalled
    stale = [r for r in late if pid_of(r.executor) == stalled]
    assert len(stale) == 1 and stale[0].ok  # it did publish, after the other finished,
    assert stale[0].output == done.output  # the outcome recorded first (the other's)
    assert len(events.of(StepFinished, 1)) == 1  # duplicate outcomes: 0
    assert step1.executor == done.executor
    assert pid_of(f"worker/{silent[0].instance}") == stalled and "silent for" in silent[0].reason
    print(f"\nRECOVERY executor SIGSTOP: {done.ts - stopped_at:.2f}s")


async def test_a_step_running_three_ack_waits_is_delivered_once(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    plan = [{"id": 1, "role": "worker", "tool": "sleep", "args": {"seconds": 4.6}}]
    async with deployment(nats_url, prefix, tmp_path, plan, workers=2) as d:
        accepted = await submit(d.bus, RunRequest(goal="long"))
        async with following(d.bus, accepted.run_id) as events:
            await events.finished()
        info: api.ConsumerInfo = await d.bus.js.consumer_info(
            stream_name(prefix, Stream.WORK), "step-worker")
    assert len(events.of(StepStarted, 1)) == 1
    assert info.num_redelivered == 0 and info.delivered.consumer_seq == 1
