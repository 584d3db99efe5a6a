"""The local deployment (``plancast up`` on this machine) as the commands that join it see
it: it serves one team, and a command given another says so instead of running that one;
and it keeps its address across restarts, so a ``plancast serve`` left running follows it.

Every process is real: ``plancast up``, ``run``, ``serve`` as children, on a scripted model.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import pytest
from anyio.abc import Process

from protocols import RunFinished
from runtime.bus import URL, free_port
from runtime.gateway import TOKEN_FILE
from runtime.testing import Rule, Scenario, open_scripted_model_server

from ..actors.harness import echo, finish
from ..subprocesses import PLANCAST, SCRIPTED_TEAM, clean_env, events_of, plancast, stderr_tail
from .test_gateway import events_of as events_over_http

pytestmark = pytest.mark.anyio

RULES = [Rule(role="planner", lines=[echo(1, "from up")]), finish("served by up")]
ANOTHER_ROLE = '[roles.echoer]\ntools = ["echo"]\ntool_steps_only = true\n'
MISSPELT_TOOL = '[roles.echoer]\ntools = ["ecoh"]\ntool_steps_only = true\n'
NO_MODEL = '[roles.planner]\nkind = "planner"\n[roles.w]\ntools = ["echo"]\n'


@asynccontextmanager
async def plancast_up(cwd: Path, env: dict[str, str], log: Path) -> AsyncIterator[Process]:
    """``plancast up`` in ``cwd``, its output in ``log``; yields once it says it serves
    (another process: no event to wait on), stops it (SIGTERM) after."""
    said = len(log.read_bytes()) if log.exists() else 0  # noqa: ASYNC240 - before it starts
    up = await _started(["up"], cwd, env, log)
    try:
        with anyio.fail_after(60):
            while b"serving " not in (await anyio.Path(log).read_bytes())[said:] \
                    and up.returncode is None:  # noqa: ASYNC110
                await anyio.sleep(0.1)
        assert up.returncode is None, f"plancast up exited: {_tail(log)}"
        yield up
    finally:
        await _stopped(up)


async def _started(argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> Process:
    with log.open("ab") as output:
        return await anyio.open_process([PLANCAST, *argv], cwd=cwd, env=env, stdout=output,
                                        stderr=output)


async def _stopped(process: Process) -> None:
    if process.returncode is None:
        process.terminate()
    with anyio.fail_after(30):
        await process.wait()


def _url(env: dict[str, str]) -> str:
    return (Path(env["PLANCAST_DATA_DIR"]) / "nats" / URL).read_text().strip()


async def test_a_command_given_another_team_than_the_local_deployments_refuses_naming_both(
    tmp_path: Path,
) -> None:
    """``--team`` (or ./plancast.toml) other than the team ``plancast up`` serves, missing,
    or failing its checks: one line naming both, exit 2, and nothing runs. The same team
    (even a copy, with a comment), or none given, runs on the local deployment."""
    env = clean_env(PLANCAST_DATA_DIR=str(tmp_path / "data"))
    async with open_scripted_model_server(Scenario(rules=RULES)) as model:
        team = SCRIPTED_TEAM.format(base_url=model.base_url)
        served = tmp_path / "plancast.toml"
        served.write_text(team)
        there = tmp_path / "there"
        there.mkdir()
        (there / "other.toml").write_text(team + ANOTHER_ROLE)
        (there / "misspelt.toml").write_text(team + MISSPELT_TOOL)
        (there / "no_model.toml").write_text(NO_MODEL)
        (there / "copy.toml").write_text("# the same team, elsewhere\n" + team)
        implicit = tmp_path / "implicit"  # a different ./plancast.toml, no --team
        implicit.mkdir()
        (implicit / "plancast.toml").write_text(team + ANOTHER_ROLE)
        nowhere = tmp_path / "nowhere"  # no team at all: the local deployment's
        nowhere.mkdir()

        async with plancast_up(tmp_path, env, tmp_path / "up.log"):
            refused = {
                "other": await plancast("run", "--team", "other.toml", "must not run",
                                        cwd=there, env=env),
                "missing": await plancast("run", "--team", "/nonexistent.toml",
                                          "must not run", cwd=there, env=env),
                "misspelt": await plancast("run", "--team", "misspelt.toml", "must not run",
                                           cwd=there, env=env),
                "no model": await plancast("run", "--team", "no_model.toml", "must not run",
                                           cwd=there, env=env),
                "implicit": await plancast("run", "must not run", cwd=implicit, env=env),
                "up": await plancast("up", "--team", "other.toml", cwd=there, env=env),
            }
            same = await plancast("run", "--json", "--team", "copy.toml", "same team",
                                  cwd=there, env=env)
            unnamed = await plancast("run", "--json", "no team given", cwd=nowhere, env=env)
            listed = await plancast("runs", "--json", cwd=nowhere, env=env)

    served_name = str(served.resolve())
    for case, result in refused.items():
        said = result.stderr.decode()
        last = said.strip().splitlines()[-1] if said.strip() else ""
        assert result.returncode == 2 and "Traceback" not in said, (case, said[-2000:])
        if case == "missing":
            assert "/nonexistent.toml does not exist" in last, last
        elif case == "no model":
            assert "has no model" in last, last
        else:  # names both teams, in one line
            named = {"implicit": "./plancast.toml", "misspelt": "--team misspelt.toml"}.get(
                case, "--team other.toml")
            assert served_name in last and named in last, (case, last)
    for result in (same, unnamed):
        assert result.returncode == 0, stderr_tail(result)
        outcome = events_of(result)[-1]
        assert isinstance(outcome, RunFinished) and outcome.answer == "served by up"
    assert f"team {served_name}" in unnamed.stderr.decode()  # which team it used
    assert listed.returncode == 0, stderr_tail(listed)
    goals = sorted(run["goal"] for run in json.loads(listed.stdout))
    assert goals == ["no team given", "same team"], goals


async def test_plancast_serve_follows_the_local_deployment_across_a_restart_of_up(
    tmp_path: Path,
) -> None:
    """Start ``up``, start ``serve`` on it, restart ``up``: the deployment is back at the
    same address, and a run submitted through the same ``serve`` finishes."""
    env = clean_env(PLANCAST_DATA_DIR=str(tmp_path / "data"))
    port, log = free_port(), tmp_path / "up.log"
    serve: Process | None = None
    async with open_scripted_model_server(Scenario(rules=RULES)) as model:
        (tmp_path / "plancast.toml").write_text(SCRIPTED_TEAM.format(base_url=model.base_url))
        try:
            async with plancast_up(tmp_path, env, log):
                before = _url(env)
                serve = await _started(["serve", "--port", str(port)], tmp_path, env,
                                       tmp_path / "serve.log")
                with anyio.fail_after(30):
                    while not _listening(port) and serve.returncode is None:  # noqa: ASYNC110
                        await anyio.sleep(0.1)
                assert serve.returncode is None, _tail(tmp_path / "serve.log")
            token = (tmp_path / "data" / TOKEN_FILE).read_text().strip()
            async with plancast_up(tmp_path, env, log), httpx2.AsyncClient(
                    base_url=f"http://127.0.0.1:{port}", timeout=10,
                    headers={"Authorization": f"Bearer {token}"}) as client:
                after = _url(env)
                with anyio.fail_after(30):  # serve reconnects on its own
                    while (listed := await client.get("/runs")).status_code != 200:  # noqa: ASYNC110
                        await anyio.sleep(0.2)
                accepted = await client.post("/runs", json={"goal": "after the restart"})
                assert accepted.status_code == 202, accepted.text
                run_id = accepted.json()["run_id"]
                with anyio.fail_after(60):
                    await events_over_http(client, run_id)  # to its end
                run = (await client.get(f"/runs/{run_id}")).json()
        finally:
            if serve is not None:
                await _stopped(serve)
    assert after == before, "the restarted deployment moved"
    assert listed.json() == []
    assert run["status"] == "finished" and run["outcome"] == "served by up", run


async def test_a_restarted_deployment_whose_port_was_taken_says_it_moved(
    tmp_path: Path,
) -> None:
    env = clean_env(PLANCAST_DATA_DIR=str(tmp_path / "data"))
    log = tmp_path / "up.log"
    async with open_scripted_model_server(Scenario(rules=RULES)) as model:
        (tmp_path / "plancast.toml").write_text(SCRIPTED_TEAM.format(base_url=model.base_url))
        async with plancast_up(tmp_path, env, log):
            before = _url(env)
        was = int(before.rsplit(":", 1)[1])
        with socket.socket() as squatter:
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            squatter.bind(("127.0.0.1", was))
            squatter.listen()
            async with plancast_up(tmp_path, env, log):
                after = _url(env)
    assert after != before
    said = " ".join(log.read_text().split())  # log lines wrap at the terminal's width
    assert said.count("moved from port") == 1, said[-2000:]
    assert f"moved from port {was} (taken by another program)" in said, said[-2000:]


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-2000:]


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0
