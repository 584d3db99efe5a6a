"""Two planner processes share a burst of submissions evenly: a planner takes on at most
``max_active_runs`` runs at once, counting those it is still storing, and one it cannot take
goes to every planner (``run.resubmit``), where one with room takes it."""

from __future__ import annotations

import contextlib
from collections import Counter
from pathlib import Path

import anyio
import pytest

from benchmarks import scripted
from benchmarks.deploy import new_prefix, settings_for
from benchmarks.workers import wait_for_planners, worker_process
from benchmarks.workloads import chain
from protocols import RunRequest, RunStarted
from runtime.bus import open_bus
from runtime.client import follow, submit
from runtime.testing import Latency, open_scripted_model_server

pytestmark = pytest.mark.anyio

RUNS = 40
LIMIT = 20
"""Each planner's ``max_active_runs``: the two together hold exactly the burst."""


@pytest.mark.parametrize("at_once", [True, False], ids=["burst", "one-after-another"])
async def test_two_planner_processes_split_the_runs_within_60_40(
        nats_url: str, tmp_path: Path, at_once: bool) -> None:
    """At once: a planner must not take more than its limit while it is still storing
    them. One after another: a planner at its limit must not refuse what the other has
    room for."""
    # One long step per run and no executor: every run stays active, holding its place.
    dag = chain(1, 600.0)
    rules = [scripted.planner_rule(dag, scripted.NOOP_ROLES, Latency(ttft=0.0, per_line=0.0))]
    async with open_scripted_model_server(scripted.scenario(rules, 1.0)) as model:
        data = scripted.team_data(model.base_url, {"noop": ["sleep"]}, max_active_runs=LIMIT)
        team_file = tmp_path / "team.toml"
        team_file.write_text(scripted.team_toml(data))
        prefix = new_prefix()
        logs = [tmp_path / f"planner-{i}.log" for i in range(2)]
        with contextlib.ExitStack() as stack:
            procs = [stack.enter_context(worker_process(["planner"], team_file, nats_url,
                                                        prefix, log)) for log in logs]
            async with open_bus(settings_for(nats_url, prefix)) as bus:
                await wait_for_planners(bus, list(zip(procs, logs, strict=True)))
                owners: list[str] = []

                async def one() -> None:
                    accepted = await submit(bus, RunRequest(goal=scripted.goal_of(dag),
                                                            max_replans=0))
                    async for event in follow(bus, accepted.run_id):
                        if isinstance(event, RunStarted):
                            owners.append(event.planner)
                            return

                with anyio.fail_after(120):
                    if at_once:
                        async with anyio.create_task_group() as tg:
                            for _ in range(RUNS):
                                tg.start_soon(one)
                    else:
                        for _ in range(RUNS):
                            await one()
    per_planner = Counter(owners)
    assert sum(per_planner.values()) == RUNS  # every run accepted, none refused
    assert len(per_planner) == 2 and max(per_planner.values()) <= 0.6 * RUNS, per_planner
