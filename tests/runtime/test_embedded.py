"""The embedded nats-server: it serves JetStream, cleans up, and never outlives its parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import anyio
import nats
import nats.errors
import pytest

from runtime.bus import (
    ENV_VAR,
    NatsServerNotFound,
    NatsServerProcess,
    NatsServerStartError,
    find_nats_server,
    free_port,
    open_embedded_server,
)

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def _process_start(pid: int) -> str | None:
    """The start time of a live (non-zombie) process, or None once it is gone.

    The start time tells a reused pid apart from the process we mean.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat.rpartition(")")[2].split()  # the name in parentheses may contain spaces
    state, start = fields[0], fields[19]
    return None if state in ("Z", "X") else start


async def _retry(attempt: Callable[[], Awaitable[T]], seconds: float = 30.0) -> T:
    """Repeat a JetStream call while the cluster elects new leaders after a node died."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return await attempt()
        except nats.errors.Error:
            if time.monotonic() > deadline:
                raise
            await anyio.sleep(0.2)


@pytest.mark.anyio
async def test_server_serves_jetstream(nats_url: str, prefix: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await js.add_stream(name=prefix, subjects=[f"{prefix}.>"])
        ack = await js.publish(f"{prefix}.hello", b"payload")
        message = await js.get_msg(prefix, ack.seq)
        assert (message.subject, message.data) == (f"{prefix}.hello", b"payload")
        await js.delete_stream(prefix)
    finally:
        await nc.close()


@pytest.mark.anyio
async def test_open_embedded_server_removes_process_and_temp_dir() -> None:
    async with open_embedded_server(max_payload=2048) as server:
        data_dir, pid = server.data_dir, server.pid
        assert server.is_running()
        assert (data_dir / "nats-server.log").is_file()
        nc = await nats.connect(server.url)
        assert nc.max_payload == 2048
        await nc.close()
    assert not server.is_running()
    assert _process_start(pid) is None
    assert not data_dir.exists()


@pytest.mark.anyio
async def test_open_embedded_server_stops_on_cancellation(tmp_path: Path) -> None:
    with anyio.CancelScope() as scope:
        async with open_embedded_server(tmp_path / "nats") as server:
            scope.cancel()
            await anyio.sleep(60)
    assert scope.cancelled_caught
    assert not server.is_running()
    assert (tmp_path / "nats" / "nats-server.log").is_file()  # a given data dir is kept


def test_bad_config_fails_with_the_server_log(tmp_path: Path) -> None:
    server = NatsServerProcess(tmp_path, extra_config=["this_is_not_an_option: 1"])
    with pytest.raises(NatsServerStartError, match="exited") as caught:
        server.start()
    assert "this_is_not_an_option" in str(caught.value)  # quoted from the server's log
    assert not server.is_running()


def test_missing_binary_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "no-such-nats-server"))
    with pytest.raises(NatsServerNotFound, match=ENV_VAR):
        find_nats_server()
    monkeypatch.delenv(ENV_VAR)
    assert Path(find_nats_server()).name == "nats-server"


@pytest.mark.anyio
async def test_restart_after_kill_keeps_url_and_data(
    fresh_nats_server: NatsServerProcess, prefix: str
) -> None:
    server = fresh_nats_server
    url, old_pid = server.url, server.pid
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name=prefix, subjects=[f"{prefix}.>"])
        await js.publish(f"{prefix}.x", b"kept")
    finally:
        await nc.close()
    server.kill()
    assert not server.is_running()
    server.start()
    assert (server.url, server.pid != old_pid) == (url, True)
    nc = await nats.connect(url)
    try:
        assert (await nc.jetstream().get_msg(prefix, 1)).data == b"kept"
    finally:
        await nc.close()


CHILD = """
import sys, time
from pathlib import Path
from runtime.bus import NatsServerProcess
server = NatsServerProcess(Path(sys.argv[1])).start()
print(server.pid, flush=True)
time.sleep(3600)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux-only")
def test_sigkill_of_parent_leaves_no_server_behind(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    parent = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    server_pid, started = 0, None
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        assert line.strip().isdigit(), f"the child printed {line!r} instead of a pid"
        server_pid = int(line)
        started = _process_start(server_pid)
        assert started is not None, "the server was not running after start()"
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10.0
        while _process_start(server_pid) == started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _process_start(server_pid) != started, "nats-server outlived its killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
        if started is not None and _process_start(server_pid) == started:
            os.kill(server_pid, signal.SIGKILL)  # the orphan this test found


@pytest.mark.cluster
@pytest.mark.anyio
async def test_cluster_keeps_r3_stream_when_its_leader_dies(
    nats_cluster: list[NatsServerProcess], prefix: str
) -> None:
    nc = await nats.connect(
        servers=[server.url for server in nats_cluster],
        reconnect_time_wait=0.1,
        max_reconnect_attempts=-1,
    )
    try:
        js = nc.jetstream()
        info = await js.add_stream(name=prefix, subjects=[f"{prefix}.>"], num_replicas=3)
        assert info.config.num_replicas == 3
        await js.publish(f"{prefix}.a", b"one", headers={"Nats-Msg-Id": "one"})
        leader = (await js.stream_info(prefix)).cluster
        assert leader is not None
        victim = next(s for s in nats_cluster if s.server_name == leader.leader)
        victim.kill()

        await _retry(lambda: js.publish(f"{prefix}.a", b"two", headers={"Nats-Msg-Id": "two"}))
        first = await _retry(lambda: js.get_msg(prefix, 1))
        second = await _retry(lambda: js.get_msg(prefix, 2))
        assert (first.data, second.data) == (b"one", b"two")
        state = (await _retry(lambda: js.stream_info(prefix))).state
        assert state.messages == 2
        new_leader = (await _retry(lambda: js.stream_info(prefix))).cluster
        assert new_leader is not None and new_leader.leader != victim.server_name
    finally:
        await nc.close()


def test_a_store_held_by_one_embedded_server_is_found_and_never_shared(tmp_path: Path) -> None:
    from runtime.bus import StoreInUse, holding, running, write_private

    store = tmp_path / "nats"
    assert running(store) is None
    with holding(store) as url_file:
        write_private(url_file, "nats://127.0.0.1:4999")
        assert running(store) == "nats://127.0.0.1:4999"
        with pytest.raises(StoreInUse, match="PLANCAST_DATA_DIR"), holding(store):
            pass
    assert running(store) is None and not url_file.exists()


def test_route_ports_are_never_ones_the_kernel_hands_out_for_port_zero() -> None:
    """A route port picked and released must not go to a server's own monitor (``-1``)
    before its routes listen: it is picked below the kernel's ephemeral range."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(50)]
    assert all(1024 <= port < low for port in ports), ports
