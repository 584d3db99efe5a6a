"""The default deployment (``plancast up``, its embedded server) is private to its user.

Attacked from where another local user stands: a process that knows the server's port (any
local user sees listening ports in ``/proc/net/tcp``) but not the secret in the data dir.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import anyio
import pytest
from nats.aio.client import Client as NatsClient

from protocols import RunFinished
from runtime.bus import (
    SECRET,
    URL,
    InsecureFile,
    open_bus,
    private_dir,
    read_private,
    running,
    secret_of,
    write_private,
)
from runtime.config import Settings
from runtime.testing import Rule, Scenario, open_scripted_model_server

from ..actors.harness import echo, finish
from ..subprocesses import (
    PLANCAST,
    PYTHON,
    SCRIPTED_TEAM,
    clean_env,
    events_of,
    plancast,
    stderr_tail,
)


@asynccontextmanager
async def plancast_up(where: Path, data_dir: Path) -> AsyncIterator[dict[str, str]]:
    """A real ``plancast up`` on ``data_dir``, serving a scripted team; yields its env once
    its URL file is there."""
    rules = [Rule(role="planner", lines=[echo(1, "private")]), finish("only mine")]
    async with open_scripted_model_server(Scenario(rules=rules)) as model:
        (where / "plancast.toml").write_text(SCRIPTED_TEAM.format(base_url=model.base_url))
        env = clean_env(PLANCAST_DATA_DIR=str(data_dir))
        up = await anyio.open_process([PLANCAST, "up"], cwd=where, env=env)
        try:
            with anyio.fail_after(60):
                while not (data_dir / "nats" / URL).exists():  # another process: no event
                    if up.returncode is not None:
                        break
                    await anyio.sleep(0.1)
            assert up.returncode is None, "plancast up exited before it served"
            yield env
        finally:
            up.terminate()
            with anyio.fail_after(30):
                await up.wait()


async def connect_raw(url: str, **options: object) -> NatsClient | str:
    """A nats-py connection as any program would make it, or why it was refused."""
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    nc = NatsClient()
    try:
        await nc.connect(url, allow_reconnect=False, connect_timeout=2,
                         max_reconnect_attempts=0, error_cb=on_error, **options)
    except Exception as exc:  # nats-py raises its own errors, timeouts, OSError ...
        with anyio.CancelScope(shield=True), suppress(Exception):
            await nc.close()  # a refused client leaves no socket behind
        return " / ".join([*errors, str(exc) or type(exc).__name__])
    return nc


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.anyio
async def test_a_local_process_without_the_secret_is_refused_and_the_cli_needs_no_flags(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    async with plancast_up(tmp_path, data) as env:
        store = data / "nats"
        url = (store / URL).read_text().strip()
        refused = await connect_raw(url)  # knows the port, not the secret
        if not isinstance(refused, str):
            await refused.close()
            pytest.fail("a client without the secret was let in")
        assert "authorization" in refused.lower(), refused
        wrong = await connect_raw(url, token="a-guess-" + "x" * 40)
        assert isinstance(wrong, str) and "authorization" in wrong.lower(), wrong
        secret = (store / SECRET).read_text().strip()
        admitted = await connect_raw(url, token=secret)
        assert not isinstance(admitted, str), admitted
        await admitted.close()

        assert mode(data) == 0o700 and mode(store) == 0o700
        for name in (URL, SECRET, "nats-server.conf", "nats-server.log"):
            assert mode(store / name) == 0o600, f"{name}: {mode(store / name):04o}"
        pid = int(next(store.glob("*.ports")).stem.rsplit("_", 1)[1])
        cmdline = await anyio.Path(f"/proc/{pid}/cmdline").read_bytes()
        assert secret.encode() not in cmdline, "ps would show it to every local user"
        monitor = json.loads(next(store.glob("*.ports")).read_text())["monitoring"][0]
        for page in ("varz", "connz?auth=1&subs=1", "subsz?subs=1", "jsz"):
            text = await anyio.to_thread.run_sync(_read_page, f"{monitor}/{page}")
            assert secret not in text, page

        elsewhere = tmp_path / "elsewhere"  # no team file, no flags: the local deployment
        elsewhere.mkdir()
        status = await plancast("status", "--json", cwd=elsewhere, env=env)
        result = await plancast("run", "--json", "hello", cwd=elsewhere, env=env)
        # The URL `plancast up` printed, copied into --nats: the secret is found all the same.
        runs = await plancast("runs", "--json", "--nats", url, cwd=elsewhere, env=env)
    assert status.returncode == 0, stderr_tail(status)
    assert runs.returncode == 0 and b'"goal":"hello"' in runs.stdout, stderr_tail(runs)
    roles = {actor["role"] for actor in json.loads(status.stdout)["actors"]}
    assert {"planner", "worker", "synthesizer"} <= roles, roles
    assert result.returncode == 0, stderr_tail(result)
    assert isinstance(events_of(result)[-1], RunFinished)
    assert "using the local deployment at nats://" in result.stderr.decode()


ATTACKER = """
import asyncio, json, os, sys
import nats

store, url = sys.argv[1], sys.argv[2]
said = {"uid": os.geteuid()}
for name in ("deployment.url", "deployment.secret", "nats-server.conf"):
    try:
        said[name] = open(os.path.join(store, name)).read()
    except OSError as exc:
        said[name] = type(exc).__name__
try:
    said["listing"] = os.listdir(store)
except OSError as exc:
    said["listing"] = type(exc).__name__

async def quiet(exc):
    pass

async def forge():
    try:
        nc = await nats.connect(url, allow_reconnect=False, connect_timeout=2,
                                max_reconnect_attempts=0, error_cb=quiet)
    except Exception as exc:
        return "refused: " + str(exc)
    await nc.publish("plancast.step.task.worker", b"forged")
    await nc.close()
    return "connected and published"

said["connect"] = asyncio.run(forge())
print(json.dumps(said))
"""


def _setpriv() -> str | None:
    return shutil.which("setpriv") if os.geteuid() == 0 else None


@pytest.mark.anyio
@pytest.mark.skipif(_setpriv() is None, reason="needs root and setpriv to act as nobody")
async def test_another_local_user_can_neither_read_the_deployment_nor_connect(
    tmp_path: Path,
) -> None:
    """``nobody`` runs a program against our ``plancast up``: the data dir sits where
    nobody can walk (a 0755 directory, as a home is), so only its own modes stop it."""
    open_parent = Path(tempfile.mkdtemp(prefix="plancast-private-"))
    try:
        os.chmod(open_parent, 0o755)
        data = open_parent / "data"
        async with plancast_up(tmp_path, data):
            store = data / "nats"
            url = (store / URL).read_text().strip()  # the port: any user sees it listen
            attacker = await anyio.run_process(
                [str(_setpriv()), "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                 PYTHON, "-c", ATTACKER, str(store), url],
                cwd="/", env={"PATH": os.environ["PATH"]}, check=False)
    finally:
        shutil.rmtree(open_parent)
    assert attacker.returncode == 0, attacker.stderr.decode()[-2000:]
    said = json.loads(attacker.stdout)
    assert said["uid"] != 0
    assert said["deployment.url"] == "PermissionError", said
    assert said["deployment.secret"] == "PermissionError", said
    assert said["nats-server.conf"] == "PermissionError", said
    assert said["listing"] == "PermissionError", said
    assert said["connect"].startswith("refused: "), said
    assert "authorization" in said["connect"].lower(), said


@pytest.mark.anyio
async def test_every_connection_of_the_local_deployment_carries_its_secret(
    tmp_path: Path,
) -> None:
    """The process that starts the server and one that joins it (as ``plancast worker``
    and ``plancast run`` do) both hold the store's secret as ``bus.settings.token``,
    whatever ``NATS_TOKEN`` said; a restarted deployment keeps the same secret."""
    settings = Settings(nats_url=None, data_dir=tmp_path / "data", token="from-env")
    store = tmp_path / "data" / "nats"
    async with open_bus(settings) as owner:
        secret = secret_of(store)
        assert secret is not None and len(secret) >= 32
        assert owner.settings.token == secret
        async with open_bus(settings, ensure_streams=False) as joiner:
            assert joiner.server_url == owner.server_url
            assert joiner.settings.token == secret
    async with open_bus(settings, ensure_streams=False) as restarted:
        assert restarted.settings.token == secret, "the secret is made once, then kept"


def test_a_secret_or_url_others_could_read_or_plant_is_refused(tmp_path: Path) -> None:
    """A secret open to the group or others may have leaked; a link may point anywhere;
    a URL others could write would take our secret to their server."""
    store = private_dir(tmp_path / "nats")
    write_private(store / SECRET, "s" * 43)
    assert secret_of(store) == "s" * 43
    (store / SECRET).chmod(0o640)
    with pytest.raises(InsecureFile, match="remove the file"):
        secret_of(store)
    (store / SECRET).unlink()
    (tmp_path / "elsewhere").write_text("t" * 43)
    (store / SECRET).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(InsecureFile, match="remove it"):
        secret_of(store)
    (store / SECRET).unlink()
    write_private(store / SECRET, "short\n")
    with pytest.raises(InsecureFile, match="does not hold a plancast secret"):
        secret_of(store)

    from runtime.bus import holding

    with holding(store) as url_file:
        url_file.write_text("nats://127.0.0.1:4999")  # 0644, as any file by default
        with pytest.raises(InsecureFile, match="may be read by other users"):
            running(store)
        write_private(url_file, "nats://127.0.0.1:4999")
        assert running(store) == "nats://127.0.0.1:4999"
    assert read_private(url_file) is None


def test_a_data_dir_open_to_others_is_closed_and_one_of_another_user_refused(
    tmp_path: Path,
) -> None:
    opened = tmp_path / "opened"
    opened.mkdir(mode=0o755)
    opened.chmod(0o755)
    assert mode(private_dir(opened)) == 0o700
    if os.geteuid() != 0:
        return  # only root can give a directory to another user
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    with pytest.raises(InsecureFile, match="PLANCAST_DATA_DIR"):
        private_dir(theirs)


@pytest.mark.anyio
async def test_plancast_up_refuses_a_secret_that_may_have_leaked(tmp_path: Path) -> None:
    """The user learns what to do, in one line, and no server starts."""
    store = private_dir(private_dir(tmp_path / "data") / "nats")
    write_private(store / SECRET, "s" * 43)
    (store / SECRET).chmod(0o644)
    (tmp_path / "plancast.toml").write_text('[roles.w]\ntools = ["echo"]\n'
                                            'tool_steps_only = true\n')
    result = await plancast("up", cwd=tmp_path,
                            env=clean_env(PLANCAST_DATA_DIR=str(tmp_path / "data")))
    said = result.stderr.decode()
    assert result.returncode == 2 and "Traceback" not in said, said
    assert "may be read by other users" in said and "remove the file" in said, said
    assert not (store / URL).exists()


def _read_page(url: str) -> str:
    """A monitoring page of the server, as text."""
    with urllib.request.urlopen(url, timeout=5.0) as response:
        return str(response.read().decode())
