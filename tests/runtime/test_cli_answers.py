"""Commands answer at once and exactly: an unknown run, a refused connection, a parameter
given twice, a goal the demo cannot answer, a permission the user lacks (in
``tests/auth/test_permissions.py``); and the tables say what they show. Real processes:
the ``plancast`` command as a child, real nats-servers."""

from __future__ import annotations

import json
import logging
import re
import signal
import subprocess
from pathlib import Path

import anyio
import pytest

from protocols import RunFinished, RunRequest, Stream, stream_name
from runtime.bus import Bus, NatsServerProcess, NotFoundError, free_port, open_bus
from runtime.client import follow, submit
from runtime.config import Settings
from runtime.testing import Rule, Scenario, open_scripted_model_server
from runtime.tools import builtin_tools
from runtime.worker import open_deployment

from ..actors.harness import echo, finish, make_team
from ..subprocesses import (
    PLANCAST,
    ROOT,
    SCRIPTED_TEAM,
    clean_env,
    events_of,
    plancast,
    stderr_tail,
)

pytestmark = pytest.mark.anyio


def one_error(result: subprocess.CompletedProcess[bytes]) -> str:
    """The one line a usage mistake prints (exit 2, nothing else on stderr)."""
    stderr = result.stderr.decode()
    lines = stderr.strip().splitlines()
    assert result.returncode == 2, stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


async def test_cancel_of_an_unknown_run_says_so_at_once(nats_url: str, prefix: str,
                                                        tmp_path: Path) -> None:
    """No planner will ever end a run nobody submitted: say so, do not wait for it."""
    result = await plancast("cancel", "run-doesnotexist", "--nats", nats_url, "--prefix",
                            prefix, cwd=tmp_path)
    said = one_error(result)
    assert "no run run-doesnotexist" in said and "plancast runs" in said, said


async def test_a_refused_connection_ends_a_command_after_its_first_attempts(
    tmp_path: Path,
) -> None:
    """Nothing listens at --nats: the command says so after a few quick attempts, instead of
    waiting out the connect timeout; it names the flag that waits for a server starting."""
    url = f"nats://127.0.0.1:{free_port()}"
    said = one_error(await plancast("run", "--nats", url, "a goal", cwd=tmp_path))
    assert said.startswith(f"error: cannot connect to NATS at {url}: connection refused"), said
    assert "--connect-timeout" in said


async def test_a_parameter_given_twice_is_named(tmp_path: Path) -> None:
    plan = ROOT / "examples" / "saved_plan" / "capacity.json"
    result = await plancast("run", "--plan", str(plan), "--param", "service=auth",
                            "--param", "service=search", "--param", "replicas=3",
                            "--param", "rps_per_replica=250", cwd=tmp_path,
                            env=clean_env(PLANCAST_DATA_DIR=str(tmp_path)))
    said = one_error(result)
    assert "--param service is given twice ('auth' and 'search')" in said, said


async def test_the_demo_refuses_a_goal_it_cannot_answer(tmp_path: Path) -> None:
    """Its model is scripted: another goal would get the demo's own answer, silently."""
    said = one_error(await plancast("demo", "another goal", cwd=tmp_path))
    assert "answers only its own goal" in said and "plancast run" in said, said


async def test_roles_lists_kinds_under_a_kind_header(tmp_path: Path) -> None:
    result = await plancast("roles", cwd=tmp_path, env=clean_env(COLUMNS="200"))
    assert result.returncode == 0, stderr_tail(result)
    header = next(line for line in result.stdout.decode().splitlines() if "version" in line)
    assert re.findall(r"\w+", header)[:2] == ["kind", "from"], header


async def test_runs_marks_token_totals_that_are_estimated(nats_url: str, prefix: str,
                                                          tmp_path: Path) -> None:
    """A model server that reports no usage (llama.cpp's) leaves the tokens counted here
    by an estimate: ``plancast runs`` says so."""
    where = ["--nats", nats_url, "--prefix", prefix]
    rules = [Rule(role="planner", lines=[echo(1, "hello")]), finish("hello")]
    async with open_scripted_model_server(Scenario(rules=rules, stream_usage=False)) as model:
        settings = Settings(nats_url=nats_url, prefix=prefix)
        async with open_deployment(settings, make_team(model.base_url),
                                   builtin_tools(plugins=False)) as bus:
            accepted = await submit(bus, RunRequest(goal="greet"))
            with anyio.fail_after(60):
                _ = [e async for e in follow(bus, accepted.run_id)]
    listed = await plancast("runs", "--json", *where, cwd=tmp_path)
    table = await plancast("runs", *where, cwd=tmp_path, env=clean_env(COLUMNS="200"))
    [row] = json.loads(listed.stdout)
    assert row["tokens"] > 0 and row["tokens_estimated"] is True, row
    shown = table.stdout.decode()
    assert f"~{row['tokens']}" in shown and "estimated in part" in shown, shown


async def test_a_consumer_leader_election_is_no_warning(
    nats_cluster: list[NatsServerProcess], prefix: str, tmp_path: Path,
) -> None:
    """A consumer of three replicas answers "leadership change", then "no responders",
    until its replicas have elected a new leader (as at a start, or after a node's loss):
    normal life, not a warning per rebind. ``plancast up`` on a cluster sees each of its
    consumers' leaders step down, serves a run after it, and has warned about none."""
    urls = ",".join(server.url for server in nats_cluster)
    rules = [Rule(role="planner", lines=[echo(1, "elected")]), finish("elected")]
    env = clean_env(NATS_URL=urls, PLANCAST_PREFIX=prefix, PLANCAST_REPLICAS="3",
                    PLANCAST_DATA_DIR=str(tmp_path / "data"), COLUMNS="400")
    async with open_scripted_model_server(Scenario(rules=rules)) as model:
        (tmp_path / "plancast.toml").write_text(SCRIPTED_TEAM.format(base_url=model.base_url))
        up = await anyio.open_process([PLANCAST, "up"], cwd=tmp_path, env=env)
        assert up.stderr is not None
        said = ""
        try:
            with anyio.fail_after(90):
                async for chunk in up.stderr:  # until it serves: then runs are taken
                    said += chunk.decode()
                    if "serving " in said:
                        break
            async with open_bus(Settings(nats_url=urls, prefix=prefix, replicas=3)) as bus:
                stepped = await step_down_consumers(bus)
            assert stepped, "up made its consumers"
            result = await plancast("run", "--json", "a goal", cwd=tmp_path, env=env)
        finally:
            up.send_signal(signal.SIGTERM)
            with anyio.fail_after(60):
                said += b"".join([chunk async for chunk in up.stderr]).decode()
                await up.wait()
    assert result.returncode == 0, stderr_tail(result)
    finished = events_of(result)[-1]
    assert isinstance(finished, RunFinished) and finished.answer == "elected", finished
    warnings = [line for line in said.splitlines() if "WARNING" in line]
    assert not [line for line in warnings if "consumer" in line], said


async def step_down_consumers(bus: Bus) -> list[str]:
    """Make the leader of every consumer of the deployment's streams step down."""
    stepped = []
    for kind in Stream:
        stream = stream_name(bus.prefix, kind)
        try:
            consumers = await bus.js.consumers_info(stream)
        except NotFoundError:
            continue
        for consumer in consumers:
            await bus.nc.request(
                f"$JS.API.CONSUMER.LEADER.STEPDOWN.{stream}.{consumer.name}", b"", timeout=10)
            stepped.append(consumer.name)
    return stepped


class Said(logging.Handler):
    """The log lines of the intake, with an event set at the first containing ``awaited``."""

    def __init__(self, awaited: str) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.awaited, self.seen = awaited, anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        if self.awaited in record.getMessage():
            self.seen.set()


async def test_a_consumer_missing_longer_than_an_election_is_one_warning(
    nats_cluster: list[NatsServerProcess], prefix: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past the grace an election takes (none here), the absence is a warning, said once;
    the consumer's return is said too."""
    monkeypatch.setattr("runtime.bus.intake.ELECTION_GRACE", 0.0)
    urls = ",".join(server.url for server in nats_cluster)
    said = Said("consumer step-worker is back")
    logger = logging.getLogger("runtime.bus.intake")
    logger.addHandler(said)
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        settings = Settings(nats_url=urls, prefix=prefix, replicas=3)
        async with open_deployment(settings, make_team("http://127.0.0.1:9"),
                                   builtin_tools(plugins=False)) as bus:
            await step_down_consumers(bus)
            with anyio.fail_after(60):
                await said.seen.wait()
    finally:
        logger.removeHandler(said)
        logger.setLevel(old_level)
    warned = [r.getMessage() for r in said.records if r.levelno == logging.WARNING
              and "step-worker" in r.getMessage()]
    assert len(warned) == 1 and "is gone" in warned[0], warned
