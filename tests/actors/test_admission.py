"""Admission: a planner takes on at most ``max_active_runs`` submitted runs at once, and
says so to the submitter of one more (a resubmit of a run it has is still "accepted")."""

from __future__ import annotations

import anyio
import pytest

from protocols import RunFinished, RunRequest
from runtime.client import RunNotAccepted, follow, submit
from runtime.config import Settings
from runtime.testing import Rule, Scenario, open_scripted_model_server
from runtime.tools import builtin_tools
from runtime.worker import open_deployment

from .harness import RUN_TIMEOUT, finish, make_team, plan_line

pytestmark = pytest.mark.anyio


async def test_a_submit_beyond_max_active_runs_is_rejected_naming_the_limit(
    nats_url: str, prefix: str
) -> None:
    slow = plan_line(1, tool="sleep", args={"seconds": 1.5})
    rules = [Rule(role="planner", lines=[slow]), finish("slept")]
    async with open_scripted_model_server(Scenario(rules=rules)) as model:
        team = make_team(model.base_url, max_active_runs=1)
        settings = Settings(nats_url=nats_url, prefix=prefix)
        async with open_deployment(settings, team, builtin_tools(plugins=False)) as bus:
            first = await submit(bus, RunRequest(goal="one"))
            with pytest.raises(RunNotAccepted, match="max_active_runs"):
                await submit(bus, RunRequest(goal="two"))
            again = await submit(bus, RunRequest(goal="one", run_id=first.run_id))
            assert again.run_id == first.run_id
            with anyio.fail_after(RUN_TIMEOUT):
                events = [e async for e in follow(bus, first.run_id)]
            assert isinstance(events[-1], RunFinished)
            with anyio.fail_after(RUN_TIMEOUT):  # the planner lets go of a run as it ends
                while True:
                    try:
                        second = await submit(bus, RunRequest(goal="two"))
                        break
                    except RunNotAccepted:
                        await anyio.sleep(0.1)
                events = [e async for e in follow(bus, second.run_id)]
            assert isinstance(events[-1], RunFinished)
