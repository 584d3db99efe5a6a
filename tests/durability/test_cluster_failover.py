"""A node of a three-node NATS cluster dies during a run; R3 streams carry it through."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from protocols import RunRequest, StepFinished
from runtime.bus import NatsServerProcess
from runtime.client import submit
from runtime.config import Settings, load_team
from runtime.testing import open_scripted_model_server
from runtime.tools import builtin_tools
from runtime.worker import open_deployment

from .harness import following, plan_scenario, team_toml

pytestmark = pytest.mark.anyio

WIDTH = 8


async def test_killing_a_cluster_node_mid_run_loses_no_step(
    nats_cluster: list[NatsServerProcess], tmp_path: Path
) -> None:
    plan = [{"id": i, "role": "worker", "tool": "sleep", "args": {"seconds": 0.4}}
            for i in range(1, WIDTH + 1)]
    plan.append({"id": WIDTH + 1, "role": "worker", "tool": "echo",
                 "args": {"text": " ".join(f"${i}" for i in range(1, WIDTH + 1))}})
    urls = ",".join(server.url for server in nats_cluster)
    settings = Settings(nats_url=urls, prefix="failover", replicas=3, ack_wait=2.0,
                        run_lease=3.0)
    async with open_scripted_model_server(plan_scenario(plan, "survived")) as model:
        team_file = tmp_path / "team.toml"
        team_file.write_text(team_toml(model.base_url).replace(
            "tool_steps_only = true", "tool_steps_only = true\nconcurrency = 2"))
        async with open_deployment(settings, load_team(team_file), builtin_tools()) as bus:
            accepted = await submit(bus, RunRequest(goal="ride out a failover"))
            async with following(bus, accepted.run_id) as events:
                await events.until(lambda e: isinstance(e, StepFinished))
                port = bus.nc.connected_url.port
                victim = next(s for s in nats_cluster if s.url.endswith(f":{port}"))
                victim.kill()  # the node this process talks to
                killed_at = time.time()
                finished = await events.finished()
    done = {e.step_id for e in events.of(StepFinished)}
    assert done == set(range(1, WIDTH + 2))  # steps lost: 0
    assert finished.answer == "survived"
    print(f"\nRECOVERY cluster node kill: run finished {finished.ts - killed_at:.2f}s later")
