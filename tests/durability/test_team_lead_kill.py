"""A sub-team's lead dies while its child run works; another takes the step over.

The team lead runs in a real child process and is killed with SIGKILL while the child
run's step is held at a gate. JetStream redelivers the parent's step task to a second
team lead, which submits the same child run again (its id is derived from the parent's
step and attempt, so the submit is idempotent), follows it to its end and answers: one
child run, one answer, no step run twice.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from protocols import RunRequest, RunStarted, StepFinished, StepStarted, child_run_id
from runtime.client import submit
from runtime.config import Settings, load_team
from runtime.testing import open_scripted_model_server, parse_scenario
from runtime.tools import builtin_tools
from runtime.worker import open_deployment

from .harness import appears, env_for, following, pid_of, spawn, stop, team_toml
from .tools import kill_test_tools

pytestmark = pytest.mark.anyio

DESK = """
[roles.desk]
kind = "team"
description = "does a part with its own plan"
members = ["worker"]
"""


def scenario() -> str:
    child = {"id": 1, "role": "worker", "tool": "gate", "args": {"name": "g"}}
    parent = {"id": 1, "role": "desk", "instruction": "dig deep"}
    return json.dumps({"rules": [
        {"role": "planner", "contains": "Goal: dig deep", "lines": [json.dumps(child)]},
        {"role": "planner", "lines": [json.dumps(parent)]},
        {"role": "synthesizer", "contains": "Goal: dig deep",
         "text": json.dumps({"action": "finish", "answer": "dug"})},
        {"role": "synthesizer", "text": json.dumps({"action": "finish", "answer": "all done"})},
    ]})


async def test_sigkill_the_team_lead_another_finishes_the_same_child_run(
    nats_url: str, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_scripted_model_server(parse_scenario(scenario(), fmt="json")) as model:
        team_file = tmp_path / "team.toml"
        team_file.write_text(team_toml(model.base_url) + DESK)
        env = env_for(nats_url, prefix, tmp_path)
        tools = builtin_tools()
        for tool in kill_test_tools():
            tools.add(tool)
        monkeypatch.setenv("PLANCAST_TEST_DIR", str(tmp_path))  # the gate runs here
        settings = Settings(nats_url=nats_url, prefix=prefix, ack_wait=1.5, run_lease=1.5)
        first = await spawn(team_file, "desk", env)
        second = None
        try:
            async with open_deployment(settings, load_team(team_file), tools,
                                       roles=["planner", "synthesizer", "worker"]) as bus:
                accepted = await submit(bus, RunRequest(goal="the whole task"))
                root = accepted.run_id
                child = child_run_id(root, 1, 1)
                async with following(bus, root) as events, following(bus, child) as inner:
                    await appears(tmp_path / "g.1.started")  # the child's step is at work
                    claim = await events.until(lambda e: isinstance(e, StepStarted))
                    assert isinstance(claim, StepStarted) and claim.child_run == child
                    os.kill(pid_of(claim.executor), signal.SIGKILL)
                    first.wait()
                    second = await spawn(team_file, "desk", env)
                    again = await events.until(lambda e: isinstance(e, StepStarted)
                                               and e.delivery > 1)
                    assert isinstance(again, StepStarted)
                    assert again.executor != claim.executor and again.attempt == 1
                    (tmp_path / "g.release").write_text("go")
                    finished = await events.finished()
                    child_end = await inner.finished()
        finally:
            stop(first)
            if second is not None:
                stop(second)
    assert finished.answer == "all done" and child_end.answer == "dug"
    assert [e.output for e in events.of(StepFinished)] == ["dug"]
    assert len(inner.of(RunStarted)) == 1  # submitted twice, started once
    assert [e.step_id for e in inner.of(StepFinished)] == [1]  # its step ran once
    assert not (tmp_path / "g.2.started").exists()
    await anyio.lowlevel.checkpoint()
