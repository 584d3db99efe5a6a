"""A sub-team's lead under per-role NATS users: it submits its child run, follows the
parent's and the child's events and cancels its child with its own rights only."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from protocols import RunFinished, RunRequest, child_run_id
from runtime.bus import open_bus
from runtime.client import follow, submit
from runtime.testing import Rule, Scenario, open_scripted_model_server

from ..actors.harness import echo, finish, make_team, plan_line
from ..secured import secured_server

pytestmark = pytest.mark.anyio

ROLES = {
    "planner": {"kind": "planner", "model": "scripted", "members": ["desk"]},
    "desk": {"kind": "team", "members": ["worker"]},
}


async def test_a_sub_team_runs_with_one_user_per_role(tmp_path: Path, prefix: str) -> None:
    rules = [Rule(role="planner", contains="Goal: do it", lines=[echo(1, "deep")]),
             Rule(role="planner", lines=[plan_line(1, role="desk", instruction="do it")]),
             finish("child answer", contains="Goal: do it"), finish("done")]
    async with open_scripted_model_server(Scenario(rules=rules)) as model:
        team = make_team(model.base_url, ROLES)
        async with secured_server(tmp_path, prefix, team) as secured, \
                secured.serving(list(team.roles)):
            async with open_bus(secured.settings("client")) as client:
                accepted = await submit(client, RunRequest(goal="hi"))
                with anyio.fail_after(60):
                    events = [e async for e in follow(client, accepted.run_id)]
                    child = [e async for e in follow(
                        client, child_run_id(accepted.run_id, 1, 1))]
            log = secured.server.log_tail(400).lower()
    assert isinstance(events[-1], RunFinished) and events[-1].answer == "done", events
    assert isinstance(child[-1], RunFinished) and child[-1].answer == "child answer"
    assert "violation" not in log
