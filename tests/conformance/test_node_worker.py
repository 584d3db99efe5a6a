"""A role written in JavaScript from docs/wire.md alone, with the official NATS packages,
served as its own NATS user beside the Python planner and synthesizer: its claims and
results count, and an output too large for a message travels by reference. It serves
several tasks at once, acknowledges long ones in progress, keeps the step's deadline,
dead-letters a task it cannot read, and hears every refusal on its own error subject.

Its tool ``misbehave`` does on a step's first attempt what a worker must not (docs/wire.md
says what the planner does then): each test shows the answer the sender and the run get.

Without Node.js it skips, naming the package (``tests.needs``); the packages are installed
from ``package-lock.json`` on first use (``npm ci``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from protocols import (
    OutcomeRefused,
    RunEvent,
    RunFailed,
    RunFinished,
    RunRequest,
    StepFailed,
    StepFinished,
    StepStarted,
    Verb,
)
from runtime.bus import open_bus
from runtime.client import follow, submit
from runtime.config import team_from_dict
from runtime.nonces import Nonces, planners_secret
from runtime.testing import Rule, Scenario, open_scripted_model_server

from ..actors.harness import finish, plan_line
from ..needs import NODE
from ..secured import Secured, secured_server
from . import nats_js

pytestmark = [pytest.mark.anyio, NODE]

HERE = Path(__file__).parent
BIG = 700_000
"""Characters of the big output: more than a message may carry (512 KiB)."""
TOOLS = ["shout", "big", "sleep", "misbehave", "ticket"]


@dataclass
class Seen:
    events: list[RunEvent]
    log: str
    """What the worker printed (its refusals, dead letters)."""

    def of(self, kind: type[Any], step_id: int | None = None) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)
                and (step_id is None or e.step_id == step_id)]

    @property
    def finished(self) -> dict[int, StepFinished]:
        return {e.step_id: e for e in self.of(StepFinished)}


@asynccontextmanager
async def deployment(tmp_path: Path, prefix: str, plan: list[str],
                     **roles: Any) -> AsyncIterator[Secured]:
    async with open_scripted_model_server(Scenario(rules=[
            Rule(role="planner", lines=plan), finish("done")])) as model:
        team = team_from_dict({
            "models": {"m": {"model": "scripted", "base_url": model.base_url,
                             "max_retries": 0}},
            "roles": {"planner": {"kind": "planner", "model": "m"},
                      "jsworker": {"tools": TOOLS, "tool_steps_only": True, **roles},
                      "synthesizer": {"kind": "synthesizer", "model": "m"}}})
        async with secured_server(tmp_path, prefix, team) as s:
            yield s


async def run_js(secured: Secured, tmp_path: Path, *,
                 before: Callable[[Secured], Awaitable[None]] | None = None,
                 ended: bool = False) -> Seen:
    """One run served by the JavaScript worker (started first), followed to its end: it
    must finish, or with ``ended`` end either way (without replans)."""
    node = nats_js()
    log = tmp_path / "worker.log"
    user = secured.user("jsworker")
    env = {**os.environ, "NATS_URL": secured.server.url, "PLANCAST_PREFIX": secured.prefix,
           "ROLE": "jsworker", "NATS_USER": user["user"], "NATS_PASSWORD": user["password"]}
    events: list[RunEvent] = []
    with log.open("wb") as out:
        worker = await anyio.open_process([node, str(HERE / "worker.mjs")], env=env,
                                          stdout=out, stderr=out)
    try:
        async with secured.serving(["planner", "synthesizer"]), \
                open_bus(secured.settings("client")) as client:
            if before is not None:
                await before(secured)
            accepted = await submit(client, RunRequest(goal="shout",
                                                       max_replans=0 if ended else 1))
            with anyio.move_on_after(90):
                async for event in follow(client, accepted.run_id):
                    events.append(event)
    finally:
        if worker.returncode is None:
            worker.terminate()
            with anyio.move_on_after(10):
                await worker.wait()
        if worker.returncode is None:
            worker.kill()
    text = log.read_text()
    assert worker.returncode == 0, text
    assert events and isinstance(events[-1], RunFinished | RunFailed if ended else RunFinished), \
        "\n".join(map(repr, events))
    assert "violation" not in secured.server.log_tail(400).lower()
    return Seen(events, text)


async def test_a_javascript_worker_serves_a_role_from_the_spec_alone(
    tmp_path: Path, prefix: str
) -> None:
    plan = [plan_line(1, role="jsworker", tool="shout", args={"text": "hello"}),
            plan_line(2, role="jsworker", tool="big", args={"size": BIG}),
            plan_line(3, role="jsworker", tool="shout", args={"text": "$2"})]
    async with deployment(tmp_path, prefix, plan) as secured:
        seen = await run_js(secured, tmp_path)
    assert not seen.of(OutcomeRefused), seen.events
    assert seen.finished[1].output == "HELLO"
    assert seen.finished[2].output.startswith("x" * 4000) and seen.finished[2].output.endswith("…")
    assert seen.finished[3].output.startswith("X" * 4000)  # $2 reached it whole, uppercased
    assert {e.executor.partition("/")[0] for e in seen.of(StepStarted)} == {"jsworker"}


async def test_several_tasks_at_once_in_progress_acks_the_deadline_and_a_bad_task(
    tmp_path: Path, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three steps of 3 s at once with a 1 s ack wait: each kept by in-progress acks (one
    delivery each); a step past its 2 s timeout answered as a retryable failure; a task
    that is not JSON dead-lettered while the worker goes on."""
    monkeypatch.setenv("PLANCAST_ACK_WAIT", "1")
    plan = [*(plan_line(i, role="jsworker", tool="sleep", args={"seconds": 3, "text": f"s{i}"})
              for i in (1, 2, 3)),
            plan_line(4, role="jsworker", tool="misbehave", args={"how": "slow", "text": "t"},
                      timeout=2)]

    async def garbage(secured: Secured) -> None:
        async with open_bus(secured.settings("admin")) as admin:
            await admin.js.publish(admin.subject(Verb.STEP, "jsworker"), b"\xff not json")

    async with deployment(tmp_path, prefix, plan) as secured:
        seen = await run_js(secured, tmp_path, before=garbage)
    started = {e.step_id: e for e in seen.of(StepStarted) if e.attempt == 1}
    first_end = min(seen.events.index(e) for e in seen.of(StepFinished))
    assert all(seen.events.index(started[i]) < first_end for i in (1, 2, 3))
    assert [e.delivery for e in seen.of(StepStarted) if e.step_id in (1, 2, 3)] == [1, 1, 1]
    assert [seen.finished[i].output for i in (1, 2, 3)] == ["S1", "S2", "S3"]
    failed = seen.of(StepFailed, 4)
    assert failed and "timed out" in failed[0].error and failed[0].will_retry, seen.events
    assert seen.finished[4].output == "T"
    assert "dead letter: not a readable task" in seen.log, seen.log


async def test_a_task_acknowledged_without_a_claim_fails_not_claimed_in_seconds(
    tmp_path: Path, prefix: str
) -> None:
    """Item 1: the claim deadline ([timeouts] claim), not the step's 600 s."""
    plan = [plan_line(1, role="jsworker", tool="misbehave",
                      args={"how": "ack_without_claim", "text": "hi"})]
    async with deployment(tmp_path, prefix, plan) as secured:
        seen = await run_js(secured, tmp_path)
    failed = seen.of(StepFailed, 1)
    assert [(e.attempt, e.cause, e.will_retry) for e in failed] == [(1, "not_claimed", True)]
    assert "[timeouts] claim" in failed[0].error
    assert seen.finished[1].output == "HI" and seen.finished[1].attempt == 2


async def test_a_stray_result_is_refused_and_the_running_attempt_counts(
    tmp_path: Path, prefix: str
) -> None:
    """Item 2: a result nobody claimed is refused (to its sender too); the attempt goes on."""
    plan = [plan_line(1, role="jsworker", tool="misbehave", args={"how": "stray", "text": "hi"})]
    async with deployment(tmp_path, prefix, plan) as secured:
        seen = await run_js(secured, tmp_path)
    assert not seen.of(StepFailed), seen.events
    refused = seen.of(OutcomeRefused)
    assert [(e.sender, e.attempt) for e in refused] == [("jsworker/stray", 1)], refused
    assert seen.finished[1].output == "HI" and seen.finished[1].attempt == 1
    assert "stray answered: step.result refused" in seen.log, seen.log


async def test_a_second_answer_for_the_same_delivery_is_refused_aloud(
    tmp_path: Path, prefix: str
) -> None:
    """Item 3: not dropped silently."""
    plan = [plan_line(1, role="jsworker", tool="misbehave", args={"how": "twice", "text": "hi"})]
    async with deployment(tmp_path, prefix, plan) as secured:
        seen = await run_js(secured, tmp_path)
    assert seen.finished[1].output == "HI"
    refused = seen.of(OutcomeRefused)
    assert len(refused) == 1 and "second answer" in refused[0].reason, refused
    assert "second answered: step.result refused: a second answer" in seen.log, seen.log


async def test_an_oversized_or_malformed_result_is_refused_to_its_sender_and_the_run(
    tmp_path: Path, prefix: str
) -> None:
    """Item 4: the sender hears it on its own error subject, the run's events say it."""
    plan = [plan_line(1, role="jsworker", tool="misbehave",
                      args={"how": "oversized", "text": "big"}),
            plan_line(2, role="jsworker", tool="misbehave",
                      args={"how": "malformed", "text": "bad"})]
    async with deployment(tmp_path, prefix, plan) as secured:
        seen = await run_js(secured, tmp_path)
    reasons = [e.reason for e in seen.of(OutcomeRefused)]
    assert any("oversized" in r for r in reasons) and any("not valid JSON" in r for r in reasons)
    assert [seen.finished[i].output for i in (1, 2)] == ["BIG", "BAD"]
    assert not seen.of(StepFailed), seen.events
    assert "oversized answered: step.result refused: oversized" in seen.log, seen.log
    assert "malformed answered: unreadable refused: malformed" in seen.log, seen.log
    assert "publish refused:" in seen.log  # 600 KiB: past the stream's own limit


async def test_a_missing_object_is_named_to_its_sender_and_fails_an_output_ref_at_once(
    tmp_path: Path, prefix: str
) -> None:
    """Item 5: an ``output_ref`` to a missing object fails the attempt at once, naming the
    object (not a heartbeat's "died, hung or dropped it"); a whole result by reference to a
    missing object is refused to its sender, naming it, and the attempt goes on."""
    plan = [plan_line(1, role="jsworker", tool="misbehave",
                      args={"how": "missing_ref", "text": "hi"}),
            plan_line(2, role="jsworker", tool="misbehave",
                      args={"how": "missing_envelope", "text": "ho"})]
    async with deployment(tmp_path, prefix, plan) as secured:
        seen = await run_js(secured, tmp_path)
    failed = seen.of(StepFailed)
    assert [(e.step_id, e.attempt, e.cause) for e in failed] == [(1, 1, "error")], failed
    assert "output_ref" in failed[0].error and "/nothing" in failed[0].error
    assert seen.finished[1].output == "HI" and seen.finished[1].attempt == 2
    assert seen.finished[2].output == "HO" and seen.finished[2].attempt == 1
    assert "missing_ref answered: step.result refused: its output_ref" in seen.log, seen.log
    told = [line for line in seen.log.splitlines() if line.startswith("missing_envelope")]
    assert told and "/gone" in told[0], seen.log
    assert any("/gone" in e.reason for e in seen.of(OutcomeRefused)), seen.events


async def test_the_worker_hands_its_tools_the_attempts_idempotency_key(
    tmp_path: Path, prefix: str
) -> None:
    """The key in the task (``idempotency_key``) is the one the planners compute for the
    attempt, and it reaches the tool (which would send it as ``Idempotency-Key``)."""
    plan = [plan_line(1, role="jsworker", tool="ticket", args={"text": "printer"})]
    async with deployment(tmp_path, prefix, plan) as secured:
        seen = await run_js(secured, tmp_path)
        keys = Nonces(planners_secret(secured.settings("planner")))
    run_id = seen.events[0].run_id
    assert seen.finished[1].output == \
        f"TICKET printer Idempotency-Key: {keys.idempotency(run_id, 1, 1)}"


async def test_a_once_step_that_timed_out_is_not_run_again_by_the_worker(
    tmp_path: Path, prefix: str
) -> None:
    """A role with ``effects = "once"``: its first attempt runs past its timeout (the
    worker answers ``cause`` ``timeout``); the next carries that attempt's key in
    ``check_keys``, and the worker, whose tools cannot check by key, answers
    ``outcome_unknown`` instead of acting again."""
    plan = [plan_line(1, role="jsworker", tool="misbehave", args={"how": "slow", "text": "t"},
                      timeout=1)]
    async with deployment(tmp_path, prefix, plan, effects="once") as secured:
        seen = await run_js(secured, tmp_path, ended=True)
        keys = Nonces(planners_secret(secured.settings("planner")))
    first = keys.idempotency(seen.events[0].run_id, 1, 1)
    failed = seen.of(StepFailed, 1)
    assert [(e.attempt, e.cause, e.will_retry) for e in failed] == [
        (1, "error", True), (2, "outcome_unknown", False)], failed
    assert "timed out" in failed[0].error and first in failed[0].error
    assert first in failed[1].error and "person" in failed[1].error
    assert not seen.finished
