"""Shared fixtures: real nats-servers on free ports, one per session and fresh ones to kill."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest

from runtime.bus import NatsServerProcess, start_cluster

from .needs import require

# The server reserves each stream's max_bytes, and the shared server holds hundreds of
# tests' streams: small ones (every process a test starts inherits this).
os.environ.setdefault("PLANCAST_MAX_STREAM_BYTES", str(8 * 1024 * 1024))


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """nats-py runs on asyncio only."""
    return "asyncio"


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServerProcess]:
    """One JetStream server shared by the session; tests keep apart with ``prefix``."""
    with NatsServerProcess(tmp_path_factory.mktemp("nats")) as server:
        yield server


@pytest.fixture(scope="session")
def nats_url(nats_server: NatsServerProcess) -> str:
    return nats_server.url


@pytest.fixture
def prefix() -> str:
    """A subject prefix (and stream name part) of this test's own, e.g. ``t1f3a9c0d``."""
    return f"t{secrets.token_hex(4)}"


@pytest.fixture
def fresh_nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServerProcess]:
    """A JetStream server of this test's own, for tests that kill or restart it."""
    with NatsServerProcess(tmp_path_factory.mktemp("nats-fresh")) as server:
        yield server


@pytest.fixture
def nats_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[NatsServerProcess]]:
    """A new three-node JetStream cluster (``n1``..``n3``), for tests that kill nodes."""
    servers = start_cluster(tmp_path_factory.mktemp("nats-cluster"))
    try:
        yield servers
    finally:
        for server in servers:
            server.stop()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``needs(command, package)`` skips without the program, naming the
    package (fails instead under ``PLANCAST_REQUIRE_TOOLS=1``), before its fixtures run."""
    for mark in item.iter_markers("needs"):
        require(*mark.args)
