"""A finished attempt is never executed again: its result is recorded before its task is
acknowledged, and a task of the attempt that comes again gets that result sent again.

Executors and planners run in real child processes (``tests.durability.runner``); the
process that must die where a lost acknowledgement or a takeover begins kills itself
there with SIGKILL (``PLANCAST_TEST_DIE``). The ``gate`` tool with ``ledger`` leaves one
line per execution.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from nats.js import api
from nats.js.errors import NotFoundError

from protocols import (
    RunRequest,
    Step,
    StepClaimed,
    StepFinished,
    StepOutcomes,
    StepResult,
    StepTask,
    Stream,
    Verb,
    decode,
    stream_name,
    subject,
)
from runtime.bus import Bus
from runtime.client import submit
from runtime.config import Settings, load_team
from runtime.nonces import Nonces
from runtime.testing import open_scripted_model_server
from runtime.tools import builtin_tools
from runtime.worker import open_deployment

from .harness import appears, env_for, following, plan_scenario, spawn, stop, team_toml

pytestmark = pytest.mark.anyio

WAIT = 60.0
"""Seconds a test waits for the work stream to settle."""


@dataclass
class Deployment:
    bus: Bus
    test_dir: Path
    prefix: str


def gate(step_id: int, name: str) -> dict[str, Any]:
    """A step that writes its execution to ``ledger.txt`` and passes once ``<name>.release``
    exists."""
    return {"id": step_id, "role": "worker", "tool": "gate",
            "args": {"name": name, "ledger": True}}


def echo(step_id: int, text: str) -> dict[str, Any]:
    return {"id": step_id, "role": "worker", "tool": "echo", "args": {"text": text}}


@asynccontextmanager
async def deployment(nats_url: str, prefix: str, tmp_path: Path, plan: list[dict[str, Any]],
                     *, here: list[str], children: list[tuple[str, dict[str, str]]],
                     worker_concurrency: int = 1) -> AsyncIterator[Deployment]:
    """The roles ``here`` in this process; each of ``children`` (roles, extra environment)
    in a runner process of its own."""
    async with open_scripted_model_server(plan_scenario(plan)) as model:
        team_file = tmp_path / "team.toml"
        team_file.write_text(team_toml(model.base_url, worker_concurrency))
        env = env_for(nats_url, prefix, tmp_path)
        settings = Settings(nats_url=nats_url, prefix=prefix, ack_wait=1.5, run_lease=1.5,
                            heartbeat_interval=0.5)
        procs: list[subprocess.Popen[str]] = []
        try:
            async with open_deployment(settings, load_team(team_file), builtin_tools(),
                                       roles=here) as bus:
                for roles, extra in children:
                    procs.append(await spawn(team_file, roles, {**env, **extra}))
                yield Deployment(bus, tmp_path, prefix)
        finally:
            for proc in procs:
                stop(proc)


def executions(test_dir: Path, run_id: str, step_id: int) -> list[str]:
    """The ledger's lines of one step: one per execution."""
    return [line for line in (test_dir / "ledger.txt").read_text().splitlines()
            if line.startswith(f"{run_id}/{step_id}/")]


async def work_settled(bus: Bus, *, delivered: int) -> api.ConsumerInfo:
    """Wait until the worker's consumer has made ``delivered`` deliveries (first ones and
    redeliveries) and holds no task unacknowledged."""
    stream = stream_name(bus.prefix, Stream.WORK)
    info: api.ConsumerInfo | None = None
    try:
        with anyio.fail_after(WAIT):
            while True:
                info = await bus.js.consumer_info(stream, "step-worker")
                if info.delivered.consumer_seq >= delivered \
                        and not info.num_ack_pending and not info.num_pending:
                    return info
                await anyio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(f"the work stream did not settle: {info}") from None


async def gone(bus: Bus, stream: str, where: str) -> None:
    """Wait until ``stream`` holds nothing on subject ``where`` (it aged out)."""
    while True:
        try:
            await bus.js.get_msg(stream, subject=where)
        except NotFoundError:
            return
        await anyio.sleep(0.2)


async def test_a_result_whose_ack_was_lost_is_sent_again_not_executed_again(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """The executor of step 1 dies after its result is stored, before it acknowledges the
    task: the task comes again, and the other executor sends the recorded result."""
    (tmp_path / "a.release").touch()  # the gate passes at once
    plan = [gate(1, "a"), echo(2, "got $1")]
    dies = {"PLANCAST_TEST_DIE": "before-ack"}
    async with deployment(nats_url, prefix, tmp_path, plan, here=["planner", "synthesizer"],
                          children=[("worker", dies), ("worker", dies)]) as d:
        accepted = await submit(d.bus, RunRequest(goal="a lost acknowledgement"))
        async with following(d.bus, accepted.run_id) as events:
            finished = await events.finished()
        info = await work_settled(d.bus, delivered=3)  # two tasks, step 1 delivered again
    assert (tmp_path / "died-before-ack").exists() and info.delivered.stream_seq == 2
    assert len(executions(tmp_path, accepted.run_id, 1)) == 1
    assert [e.output for e in events.of(StepFinished, 1)] == ["a passed"]
    assert events.of(StepFinished, 2)[0].output == "got a passed"
    assert finished.answer == "all done"


async def test_a_takeover_resending_a_finished_attempts_task_does_not_execute_it(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """The run's planner dies after step 1's task is stored and before its state says so;
    step 1 then finishes. The planner taking the run over sends step 1's task again, past
    the duplicate window (made short here: a takeover more than DUPLICATE_WINDOW after the
    dispatch), and the executor sends the recorded result."""
    plan = [gate(1, "g"), echo(2, "got $1")]
    planner = {"PLANCAST_TEST_DIE": "before-save:g", "PLANCAST_RUN_LEASE": "4"}
    async with deployment(nats_url, prefix, tmp_path, plan, here=["synthesizer"],
                          children=[("planner", planner), ("planner", planner),
                                    ("worker", {})]) as d:
        work = stream_name(prefix, Stream.WORK)
        config = (await d.bus.js.stream_info(work)).config
        await d.bus.js.update_stream(replace(config, duplicate_window=0.5))
        accepted = await submit(d.bus, RunRequest(goal="a takeover"), timeout=30)
        async with following(d.bus, accepted.run_id) as events:
            await appears(tmp_path / "died-before-save")  # the dispatch is not in its state
            await appears(tmp_path / "g.1.started")
            (tmp_path / "g.release").touch()
            finished = await events.finished()
        await work_settled(d.bus, delivered=3)  # step 1, step 1 again, step 2
    assert len(executions(tmp_path, accepted.run_id, 1)) == 1
    assert [e.output for e in events.of(StepFinished, 1)] == ["g passed"]
    assert finished.answer == "all done"


async def test_a_task_delivered_again_while_its_attempt_runs_here_waits_for_that_run(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """As above, but step 1 still runs when its task comes again, to the same executor:
    the second delivery waits for the first execution's record and sends its result; the
    step runs once (``actors.finished.InHand``: its claim alone would not tell a running
    execution from one that died)."""
    plan = [gate(1, "g"), echo(2, "got $1")]
    planner = {"PLANCAST_TEST_DIE": "before-save:g", "PLANCAST_RUN_LEASE": "4"}
    async with deployment(nats_url, prefix, tmp_path, plan, here=["synthesizer"],
                          children=[("planner", planner), ("planner", planner),
                                    ("worker", {})], worker_concurrency=2) as d:
        work = stream_name(prefix, Stream.WORK)
        config = (await d.bus.js.stream_info(work)).config
        await d.bus.js.update_stream(replace(config, duplicate_window=0.5))
        accepted = await submit(d.bus, RunRequest(goal="a takeover mid-step"), timeout=30)
        async with following(d.bus, accepted.run_id) as events:
            await appears(tmp_path / "died-before-save")
            await appears(tmp_path / "g.1.started")
            with anyio.fail_after(WAIT):  # the new owner's task reached the executor
                while (await d.bus.js.consumer_info(work, "step-worker")
                       ).delivered.consumer_seq < 2:
                    await anyio.sleep(0.1)
            (tmp_path / "g.release").touch()
            finished = await events.finished()
        await work_settled(d.bus, delivered=3)
    assert len(executions(tmp_path, accepted.run_id, 1)) == 1
    assert [e.output for e in events.of(StepFinished, 1)] == ["g passed"]
    assert finished.answer == "all done"


async def test_a_finished_attempts_result_is_sent_again_as_the_new_deliverys_own_answer(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """The attempt's first answer was read already, and may not have counted (chaos seed
    47, run c47-0075: a planner that had just taken the run over refused it, its step not
    planned again yet, then sent the task again). The executor that gets the task again
    answers with the recorded outcome as its own, claiming it, under its own message id:
    sent under the first answer's id, the results stream dropped it as a duplicate, and the
    run waited for an answer that never came."""
    run_id, step = "run-resent", Step(id=1, role="worker", tool="echo", args={"text": "once"})
    task = StepTask(run_id=run_id, goal="g", step=step, attempt=1,
                    nonce=Nonces("").task(run_id, 1, 1))
    async with deployment(nats_url, prefix, tmp_path, [echo(1, "x")], here=["synthesizer"],
                          children=[("worker", {})]) as d:
        answers = await d.bus.js.subscribe(
            subject(prefix, Verb.RESULT, run_id, "worker"),
            stream=stream_name(prefix, Stream.RESULTS), ordered_consumer=True)
        results: list[StepResult] = []
        with anyio.fail_after(WAIT):
            for copy in ("first", "again"):  # two messages of one task: a re-sent task
                await d.bus.publish_durable(subject(prefix, Verb.STEP, "worker"), task,
                                            msg_id=f"{run_id}/{copy}")
                want = len(results) + 1
                async for msg in answers.messages:
                    message = decode(msg.data, StepResult | StepClaimed | StepOutcomes)
                    for one in message.outcomes if isinstance(message, StepOutcomes) \
                            else [message]:
                        if isinstance(one, StepResult):
                            results.append(one)
                    if len(results) == want:
                        break
        await answers.unsubscribe()
    first, again = results
    assert first.ok and again.ok and first.output == again.output == "once"
    assert again.claims and again.executor.startswith("worker/")  # it claims this delivery
    # The recorded outcome, not a second execution: the same run's times.
    assert (again.started_at, again.finished_at) == (first.started_at, first.finished_at)


async def test_the_record_of_a_finished_step_expires_with_the_runs_events(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """The record is kept as long as the run's events, within the same storage limit and
    replicas, and then goes with them."""
    age = 5.0
    async with open_scripted_model_server(plan_scenario([echo(1, "kept a while")])) as model:
        team_file = tmp_path / "team.toml"
        team_file.write_text(team_toml(model.base_url))
        settings = Settings(nats_url=nats_url, prefix=prefix, event_max_age=age)
        async with open_deployment(settings, load_team(team_file), builtin_tools(),
                                   roles=["planner", "worker", "synthesizer"]) as bus:
            accepted = await submit(bus, RunRequest(goal="expire"))
            async with following(bus, accepted.run_id) as events:
                await events.finished()
            finished = stream_name(prefix, Stream.FINISHED)
            configs = {kind: (await bus.js.stream_info(stream_name(prefix, kind))).config
                       for kind in (Stream.FINISHED, Stream.EVENTS)}
            record = subject(prefix, Verb.FINISHED, "worker", accepted.run_id, "1", "1")
            raw = await bus.js.get_msg(finished, subject=record, direct=True)
            kept = decode(raw.data or b"", StepResult)
            with anyio.fail_after(age * 6):
                await gone(bus, finished, record)
                await gone(bus, stream_name(prefix, Stream.EVENTS),
                           subject(prefix, Verb.EVENT, accepted.run_id))
    assert kept.output == "kept a while" and kept.ok
    own, events_config = configs[Stream.FINISHED], configs[Stream.EVENTS]
    assert own.max_age == events_config.max_age == age
    assert own.max_bytes == events_config.max_bytes == settings.max_stream_bytes
    assert own.num_replicas == events_config.num_replicas
    assert own.max_msgs_per_subject == 1 and own.allow_direct
