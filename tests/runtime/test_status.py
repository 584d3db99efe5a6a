"""``plancast status`` against a real nats-server: live actors from heartbeats, active runs
from the run-state bucket, as structs, as tables and as ``--json`` from the command line."""

from __future__ import annotations

import io
import json
import os
import re
import socket
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from nats.js.errors import BucketNotFoundError
from rich.console import Console

from protocols import RunRecord, RunRequest, Step, StepRecord, StepStatus, Verb, encode, runs_bucket
from runtime.actor import Actor, Source, Subscription, on
from runtime.bus import Bus, Delivery, open_bus
from runtime.cli import render_status
from runtime.client import DeploymentStatus, collect_runs, collect_status, run_status
from runtime.config import Settings

pytestmark = pytest.mark.anyio

HEARTBEAT = 0.2
WAIT = 0.6
"""Three heartbeat intervals: every live actor beats within it."""
PLANCAST = str(Path(sys.executable).with_name("plancast"))


class Listener(Actor):
    """Takes RunRequests on one core subject and holds each until ``release`` is set."""

    role = "listener"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.working = anyio.Event()
        self.release = anyio.Event()

    def sources(self) -> Sequence[Source]:
        return [Subscription(self.bus.subject(Verb.RESULT, self.instance, "status"))]

    @on(RunRequest)
    async def hold(self, request: RunRequest, delivery: Delivery) -> None:
        self.working.set()
        await self.release.wait()


def step(step_id: int, status: StepStatus) -> StepRecord:
    return StepRecord(step=Step(id=step_id, role="echo", tool="echo"), round=1, status=status)


def record(run_id: str, *, finished: bool = False, now: float) -> RunRecord:
    return RunRecord(
        run_id=run_id, request=RunRequest(goal=f"find out what {run_id} is about " * 4),
        status="finished" if finished else "active", owner="planner-host-1-ab12",
        lease_until=now + 30.0, round=1,
        order=[1, 2, 3],
        started_at=now - 12.0, updated_at=now,
    )


@asynccontextmanager
async def deployment(nats_url: str, prefix: str) -> AsyncIterator[tuple[Bus, list[Listener]]]:
    """Two listeners beating every 0.2 s (one busy), an active and a finished run stored."""
    settings = Settings(nats_url=nats_url, prefix=prefix, heartbeat_interval=HEARTBEAT)
    async with open_bus(settings) as bus, anyio.create_task_group() as tg:
        kv = await bus.js.key_value(runs_bucket(prefix))
        now = time.time()
        await kv.put("runs.r-active", encode(record("r-active", now=now)))
        for sid, status in ((1, "done"), (2, "running"), (3, "pending")):
            await kv.put(f"runs.r-active.steps.{sid}", encode(step(sid, status)))
        await kv.put("runs.r-done", encode(record("r-done", finished=True, now=now)))
        listeners = [Listener(bus, instance="idle-1"), Listener(bus, instance="busy-1")]
        for listener in listeners:
            await tg.start(listener.serve)
        busy = listeners[1]
        await bus.publish(bus.subject(Verb.RESULT, busy.instance, "status"),
                          RunRequest(goal="hold on"))
        with anyio.fail_after(10):
            await busy.working.wait()
        try:
            yield bus, listeners
        finally:
            busy.release.set()
            for listener in listeners:
                listener.drain()


def check(found: DeploymentStatus | dict[str, Any]) -> None:
    """The deployment above, whether as structs or as decoded JSON."""
    data: dict[str, Any] = found if isinstance(found, dict) else msgspec.to_builtins(found)
    assert set(data) == {"actors", "runs"}
    actors = {a["instance"]: a for a in data["actors"]}
    assert set(actors) == {"idle-1", "busy-1"}
    for actor in actors.values():
        assert actor["role"] == "listener"
        assert actor["pid"] == os.getpid()
        assert actor["host"] == socket.gethostname()
        assert actor["interval"] == HEARTBEAT
        assert actor["draining"] is False
        assert actor["last_heartbeat_age"] >= 0
    assert actors["busy-1"]["in_flight"] == ["RunRequest"]
    assert actors["idle-1"]["in_flight"] == []
    [run] = data["runs"]  # the finished run is not listed
    assert run["run_id"] == "r-active"
    assert run["owner"] == "planner-host-1-ab12"
    assert (run["round"], run["steps_done"], run["steps_total"]) == (1, 1, 3)
    assert 0 < run["lease_remaining"] <= 30.0
    assert run["age"] >= 12.0
    assert run["goal"].startswith("find out what r-active is about")


async def test_collect_status_lists_live_actors_and_active_runs(
    nats_url: str, prefix: str
) -> None:
    async with deployment(nats_url, prefix) as (bus, _):
        found = await collect_status(bus, wait=WAIT)
    check(found)


async def test_status_command_prints_json(nats_url: str, prefix: str) -> None:
    async with deployment(nats_url, prefix):
        result = await anyio.run_process(
            [PLANCAST, "status", "--json", "--nats", nats_url, "--prefix", prefix,
             "--wait", str(WAIT)],
            check=False,
        )
    assert result.returncode == 0, result.stderr.decode()
    check(json.loads(result.stdout))


async def test_status_command_without_nats_exits_2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("NATS_URL", "PLANCAST_NATS_URL")}
    result = await anyio.run_process([PLANCAST, "status"], check=False, env=env, cwd=tmp_path)
    assert result.returncode == 2
    message = " ".join(result.stderr.decode().split())
    assert "status needs a running deployment" in message
    assert "--nats" in message
    assert "NATS_URL" in message
    assert result.stdout == b""


async def test_status_of_an_empty_prefix_creates_nothing(nats_url: str, prefix: str) -> None:
    settings = Settings(nats_url=nats_url, prefix=prefix, heartbeat_interval=HEARTBEAT)
    async with open_bus(settings, ensure_streams=False) as bus:
        found = await collect_status(bus, wait=0.1)
        assert found == DeploymentStatus(actors=[], runs=[])
        with pytest.raises(BucketNotFoundError):
            await bus.js.key_value(runs_bucket(prefix))


async def test_collect_runs_of_an_empty_bucket(nats_url: str, prefix: str) -> None:
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix)) as bus:
        assert await collect_runs(bus) == []


async def test_run_status_counts_steps_and_a_lapsed_lease() -> None:
    now = 1_000_000.0
    stale = record("r1", now=now)
    row = run_status(stale, now + 40.0, done={1})
    assert (row.steps_done, row.steps_total) == (1, 3)
    assert row.lease_remaining == pytest.approx(-10.0)
    assert row.age == pytest.approx(52.0)


async def test_render_status_shows_both_tables() -> None:
    now = time.time()
    found = DeploymentStatus(
        actors=[], runs=[run_status(record("r-render", now=now), now, done={1})]
    )
    out = io.StringIO()
    render_status(found, Console(file=out, width=200), wait=WAIT)
    text = out.getvalue()
    assert "no live actors" in text
    assert "r-render" in text
    assert "1/3" in text
    assert "find out what r-render is about" in text
    assert "…" in text  # the long goal is shortened


async def test_render_status_fits_80_columns_and_shows_text_as_written() -> None:
    """At 80 columns every header and id is whole (not ``st…``), every line fits, and a
    goal holding markup or an emoji code is shown as written."""
    now = time.time()
    actor = {"role": "synthesizer", "instance": "worker-host-12345-ab12",
             "host": "worker-host", "pid": 12345, "in_flight": ["run-0123456789ab"],
             "handled": 7, "restarts": 2, "draining": True, "started_at": now - 60,
             "interval": HEARTBEAT, "last_heartbeat_age": 0.4}
    goal = "[/x] [bold] :thumbs_up: [/INST]"
    runs = [run_status(msgspec.structs.replace(
        record("run-0123456789ab", now=now), request=RunRequest(goal=goal)), now, done={1})]
    for width, headers in (
        (80, ("role", "instance", "in flight", "handled", "last beat", "state")),
        (120, ("role", "instance", "host", "pid", "in flight", "handled", "last beat",
               "restarts", "draining")),
    ):
        console = Console(width=width, record=True, file=io.StringIO())
        status = msgspec.convert({"actors": [actor], "runs": []}, DeploymentStatus)
        render_status(msgspec.structs.replace(status, runs=runs), console, wait=WAIT)
        text = console.export_text()
        assert max(len(line) for line in text.splitlines()) <= width, text
        assert "┃ " + " ┃ ".join(headers) + " ┃" in " ".join(text.split()), text
        assert re.search(r"┃ run +┃ goal +┃ owner +┃ lease +┃ steps +┃ tokens +┃ age +┃", text)
        assert "│ run-0123456789ab │" in text, text
        assert all(word in text for word in goal.split()), text
        assert "│ synthesizer │" in text, text  # a role name is never folded


async def test_render_status_lists_each_actors_tools_mcp_servers_included() -> None:
    now = time.time()
    actor = {"role": "researcher", "instance": "h-1-ab12", "host": "h", "pid": 1,
             "in_flight": [], "handled": 0, "restarts": 0, "draining": False,
             "started_at": now, "interval": HEARTBEAT, "last_heartbeat_age": 0.1,
             "tools": ["math", "notes__read"]}
    for width in (80, 120):
        console = Console(width=width, record=True, file=io.StringIO())
        status = msgspec.convert({"actors": [actor], "runs": []}, DeploymentStatus)
        render_status(status, console, wait=WAIT)
        text = console.export_text()
        assert "┃ tools" in text and max(len(line) for line in text.splitlines()) <= width
        if width == 120:  # one tool a line, whole
            assert "│ notes__read" in text and "│ math" in text, text
