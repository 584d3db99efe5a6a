"""Pieces the kill tests share: a team file, a scripted plan, runner processes, events."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from protocols import RunEvent, RunFailed, RunFinished
from runtime.bus import Bus
from runtime.client import follow
from runtime.testing import Scenario, parse_scenario

from ..invariants import event_log_violations

ROOT = Path(__file__).resolve().parents[2]
FAST = {"PLANCAST_ACK_WAIT": "1.5", "PLANCAST_RUN_LEASE": "1.5",
        "PLANCAST_HEARTBEAT_INTERVAL": "0.5", "PLANCAST_DRAIN_TIMEOUT": "1"}
"""Short timings so a redelivery or a takeover happens within seconds."""


def team_toml(base_url: str, worker_concurrency: int = 1) -> str:
    """Planner and synthesizer on the scripted model; a tool-only ``worker`` role."""
    inline = f'{{ model = "scripted", base_url = "{base_url}" }}'
    return f"""
[roles.planner]
kind = "planner"
model = {inline}

[roles.synthesizer]
kind = "synthesizer"
model = {inline}

[roles.worker]
tools = ["gate", "echo", "sleep", "crash", "die"]
tool_steps_only = true
{f"concurrency = {worker_concurrency}" if worker_concurrency != 1 else ""}

[roles.local]
tools = ["echo"]
tool_steps_only = true

[roles.supervisor]
kind = "supervisor"
"""


def plan_scenario(
    lines: list[dict[str, Any]], answer: str = "all done",
    replan: list[dict[str, Any]] | None = None,
) -> Scenario:
    """The planner answers ``lines`` (then ``replan``, if given); the synthesizer finishes."""
    finish = json.dumps({"action": "finish", "answer": answer})
    first: dict[str, Any] = {"role": "planner", "lines": [json.dumps(line) for line in lines]}
    rules = [first]
    if replan is not None:
        first["times"] = 1
        rules.append({"role": "planner", "lines": [json.dumps(line) for line in replan]})
    rules.append({"role": "synthesizer", "text": finish})
    return parse_scenario(json.dumps({"rules": rules}), fmt="json")


def env_for(nats_url: str, prefix: str, test_dir: Path) -> dict[str, str]:
    return {**os.environ, **FAST, "NATS_URL": nats_url, "PLANCAST_PREFIX": prefix,
            "PLANCAST_TEST_DIR": str(test_dir),
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def runner_argv(team_file: Path, roles: str) -> list[str]:
    return [sys.executable, "-m", "tests.durability.runner", str(team_file), roles]


async def spawn(team_file: Path, roles: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """Start a runner process and wait until its actors serve."""
    proc = subprocess.Popen(runner_argv(team_file, roles), env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    with anyio.fail_after(30):
        line = await anyio.to_thread.run_sync(proc.stdout.readline)
    assert line.startswith("READY"), f"runner did not start: {line!r}"
    return proc


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


async def appears(path: Path, timeout: float = 30) -> None:
    """Wait until a test tool wrote ``path`` (it marks that a step is inside the tool)."""
    with anyio.fail_after(timeout):
        while not path.exists():
            await anyio.sleep(0.02)


def pid_of(executor: str) -> int:
    """``role/host-pid-rand`` → pid (instance ids embed the process id)."""
    return int(executor.rsplit("/", 1)[1].rsplit("-", 2)[1])


class Events:
    """A run's events, collected in the background; tests wait on what they expect."""

    def __init__(self) -> None:
        self.items: list[RunEvent] = []
        self._changed = anyio.Event()

    async def collect(self, bus: Bus, run_id: str) -> None:
        async for event in follow(bus, run_id):
            self.items.append(event)
            self._changed.set()
            self._changed = anyio.Event()

    async def until(self, predicate: Callable[[RunEvent], bool], timeout: float = 60) -> RunEvent:
        with anyio.fail_after(timeout):
            while True:
                for event in self.items:
                    if predicate(event):
                        return event
                    if isinstance(event, RunFailed):
                        raise AssertionError(f"the run failed: {event.reason}")
                await self._changed.wait()

    def of(self, kind: type[Any], step_id: int | None = None) -> list[Any]:
        return [e for e in self.items if isinstance(e, kind)
                and (step_id is None or getattr(e, "step_id", None) == step_id)]

    async def finished(self) -> RunFinished:
        """Wait for the run to finish; its whole log must keep ``tests.invariants``' rules."""
        event = await self.until(lambda e: isinstance(e, RunFinished))
        assert isinstance(event, RunFinished)
        self.check()
        return event

    def check(self) -> None:
        """The events so far break no rule (the run's end rules apply once it ended)."""
        ended = bool(self.items) and isinstance(self.items[-1], RunFinished | RunFailed)
        violations = event_log_violations(self.items, complete=ended)
        listing = "\n".join(f"  {e.seq:3} {e!r:.220}" for e in self.items)
        assert violations == [], "\n".join([*violations, listing])


@asynccontextmanager
async def following(bus: Bus, run_id: str) -> AsyncIterator[Events]:
    events = Events()
    async with anyio.create_task_group() as tg:
        tg.start_soon(events.collect, bus, run_id)
        yield events
        tg.cancel_scope.cancel()
