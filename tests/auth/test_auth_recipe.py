"""docs/security.md "A user per role" as written: ``auth init``, a nats-server whose config
has the ``include`` line it printed, each role a worker of its own user, and a run by
``client``; and the users' files as other NATS clients read them (nats.py, nats.js)."""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import anyio
import nats
import pytest
from anyio.abc import Process

from runtime.bus import find_nats_server, free_port
from runtime.testing import Rule, Scenario, open_scripted_model_server

from ..actors.harness import echo, finish
from ..conformance import nats_js
from ..needs import NODE
from ..subprocesses import PLANCAST, ROOT, clean_env

pytestmark = pytest.mark.anyio

DOC = ROOT / "docs" / "security.md"
TEAM = """
[models.scripted]
model = "scripted-model"
base_url = "{base_url}"
[roles.planner]
kind = "planner"
model = "scripted"
[roles.coder]
tools = ["echo"]
tool_steps_only = true
[roles.synthesizer]
kind = "synthesizer"
model = "scripted"
"""
RULES = [Rule(role="planner", lines=[echo(1, "hello", role="coder")]),
         finish("the coder said hello")]


def recipe() -> str:
    """The shell block of "A user per role" that starts with ``plancast auth init``."""
    section = DOC.read_text().split("## A user per role", 1)[1].split("\n## ", 1)[0]
    [block] = [body for body in re.findall(r"```sh\n(.*?)```", section, re.S)
               if body.startswith("plancast auth init")]
    return block


def printed_include(output: str) -> str:
    """The ``include`` line ``auth init`` told us to add."""
    found = re.search(r'include "[^"]+"', output)
    assert found, output
    return found.group(0)


@asynccontextmanager
async def process_group(proc: Process) -> AsyncIterator[Process]:
    """Ends ``proc`` and everything it left running in the background (its process group):
    SIGTERM, then SIGKILL for what lingers."""
    try:
        yield proc
    finally:
        with anyio.CancelScope(shield=True):
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                with anyio.move_on_after(30):
                    while _alive(proc.pid):  # noqa: ASYNC110 - not all of them our children
                        await anyio.sleep(0.05)
                if not _alive(proc.pid):
                    break
            await proc.wait()


def _alive(group: int) -> bool:
    """Whether a process of ``group`` still runs (zombies do not count: an orphan's is
    reaped by whoever adopted it)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _, pgrp = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, IndexError):
            continue
        if int(pgrp) == group and state not in "ZX":
            return True
    return False


async def test_the_auth_recipe_runs_as_written(tmp_path: Path) -> None:
    port = free_port()
    script = recipe().replace("4222", str(port))
    assert "--creds plancast-auth/admin.json" in script and "for role in" in script
    env = {**clean_env(PLANCAST_CONNECT_TIMEOUT="30"),  # the server starts in the background
           "PATH": f"{Path(PLANCAST).parent}{os.pathsep}{os.environ['PATH']}"}
    log = tmp_path / "recipe.log"
    async with open_scripted_model_server(Scenario(rules=RULES)) as model:
        (tmp_path / "plancast.toml").write_text(TEAM.format(base_url=model.base_url))
        with log.open("wb") as out:  # a file: the background workers keep writing to it
            proc = await anyio.open_process(["bash", "-euo", "pipefail", "-c", script],
                                            cwd=tmp_path, env=env, stdout=out, stderr=out,
                                            start_new_session=True)
        async with process_group(proc):
            with anyio.fail_after(180):
                code = await proc.wait()  # the run is the block's last command
    said = log.read_text(errors="replace")
    assert code == 0, said[-4000:]
    assert "answer: the coder said hello" in said, said[-4000:]
    config = (tmp_path / "nats-server.conf").read_text()
    assert printed_include(said) in config.splitlines(), (said, config)
    contexts = {p.stem for p in (tmp_path / "plancast-auth").glob("*.json")}
    assert {"admin", "planner", "coder", "synthesizer", "client", "watcher"} == contexts


@pytest.fixture
async def users_server(tmp_path: Path) -> AsyncIterator[Path]:
    """``auth init`` for a server config in a directory of its own (``--server-config``),
    and nats-server (started elsewhere) with the ``include`` line it printed: yields
    ``coder``'s file."""
    port = free_port()
    config = tmp_path / "etc" / "nats" / "server.conf"
    config.parent.mkdir(parents=True)
    (tmp_path / "plancast.toml").write_text(TEAM.format(base_url="http://127.0.0.1:9/v1"))
    init = await anyio.run_process(
        [PLANCAST, "auth", "init", "users", "--nats", f"nats://127.0.0.1:{port}",
         "--server-config", "etc/nats/server.conf"],
        cwd=tmp_path, env=clean_env(), check=False)
    assert init.returncode == 0, init.stderr.decode()
    config.write_text(f"listen: 127.0.0.1:{port}\njetstream {{ store_dir: "
                      f"{json.dumps(str(tmp_path / 'data'))} }}\n"
                      f"{printed_include(init.stdout.decode())}\n")
    log = tmp_path / "nats.log"
    with log.open("wb") as out:
        server = await anyio.open_process([find_nats_server(), "-c", str(config)], cwd="/",
                                          stdout=out, stderr=out, start_new_session=True)
    async with process_group(server):
        with anyio.fail_after(30):
            while True:  # until it listens (or it ends: a config it refused)
                assert server.returncode is None, log.read_text()
                with suppress(OSError):
                    await (await anyio.connect_tcp("127.0.0.1", port)).aclose()
                    break
                await anyio.sleep(0.05)
        yield tmp_path / "users" / "coder.json"


ACCOUNT_INFO = "io.nats.jetstream.api.v1.account_info_response"


async def test_nats_py_connects_with_only_what_a_users_file_says(users_server: Path) -> None:
    """As ``coder``, from its file alone: a request, whose reply comes on the file's inbox
    prefix (the only inbox the user may read)."""
    context = json.loads(await anyio.Path(users_server).read_text())
    nc = await nats.connect(context["url"], user=context["user"],
                            password=context["password"],
                            inbox_prefix=context["inbox_prefix"], allow_reconnect=False)
    try:
        reply = await nc.request("$JS.API.INFO", b"", timeout=10)
    finally:
        await nc.close()
    assert json.loads(reply.data)["type"] == ACCOUNT_INFO


@NODE
async def test_nats_js_connects_with_only_what_a_users_file_says(users_server: Path) -> None:
    node = nats_js()
    with anyio.fail_after(60):
        said = await anyio.run_process(
            [node, str(ROOT / "tests" / "conformance" / "context.mjs"), str(users_server)],
            check=False)
    assert said.returncode == 0, said.stderr.decode()
    assert said.stdout.decode().strip() == ACCOUNT_INFO
