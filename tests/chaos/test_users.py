"""The chaos deployment's users: what a node refuses is counted, and a node's route port
takes no process that lacks the route secret (an open one would bypass every user's rights)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio
import anyio.abc
import pytest

from runtime.config import load_team

from ..secured import secured_server
from .cluster import start_nodes, stop_nodes
from .driver import PREFIX, team_toml
from .evidence import permission_violations
from .netns import open_network
from .report import Report, render
from .users import make_users

pytestmark = pytest.mark.anyio
LOG_WAIT = 10.0
"""Seconds a node gets to write a refusal to its log (it answers the client first)."""


async def _logged(paths: Sequence[Path], done: Callable[[list[str]], bool], *,
                  routes: bool = False) -> list[str]:
    """The refusals in ``paths`` (of users, or of ``routes``) once ``done`` says they are
    all there (a log file has no event to wait on: it is read again until the deadline)."""
    with anyio.fail_after(LOG_WAIT):
        while not done(found := permission_violations(paths, routes=routes)):  # noqa: ASYNC110
            await anyio.sleep(0.05)
    return found


def _team(tmp_path: Path) -> Path:
    team_file = tmp_path / "team.toml"
    team_file.write_text(team_toml("http://127.0.0.1:9/v1", timeouts=True))
    return team_file


async def test_what_a_node_refuses_a_role_counts_against_the_run(tmp_path: Path) -> None:
    team = load_team(_team(tmp_path))
    async with secured_server(tmp_path, PREFIX, team) as secured:
        errors: list[str] = []
        worker = await secured.connect("worker", errors, anyio.Event())
        try:
            await worker.publish(f"{PREFIX}.event.c1-0001", b"{}")  # only the planner may
            await worker.subscribe(f"{PREFIX}.step.worker")  # workers pull, never subscribe
            await worker.flush()
        finally:
            await worker.close()
        refused = await _hello(secured.server.host, secured.server.port,
                               {"user": "worker", "pass": "not-the-password"})
        assert refused.startswith(b"-ERR 'Authorization Violation'"), refused
        found = await _logged([secured.server.log_path], lambda lines: len(lines) >= 3)
    assert any("Publish Violation" in f and "user:worker" in f and ".event." in f
               for f in found), found
    assert any("Subscription Violation" in f and ".step.worker" in f for f in found), found
    assert any("authentication error" in f for f in found), found
    report = Report(config={"users": True}, runs=[], duplicates={}, redeliveries=0,
                    executions=0, faults=[], unavailable={}, silences={}, seconds=0.0,
                    in_flight={}, members={}, permission_violations=found)
    assert len([p for p in report.problems() if p.startswith("permission violation")]) == 3
    assert "permission violations (nodes)  3 (users on)" in render(report)


async def _hello(host: str, port: int, connect: dict[str, object], then: bytes = b"") -> bytes:
    """Connect as a raw local process, send CONNECT, PING and ``then``; the first answer."""
    async with await anyio.connect_tcp(host, port) as stream:
        info = await _line(stream)
        assert info.startswith(b"INFO "), info
        options = {"verbose": False, "pedantic": False, "tls_required": False, **connect}
        await stream.send(f"CONNECT {json.dumps(options)}\r\nPING\r\n".encode() + then)
        return await _line(stream)


async def test_a_chaos_node_takes_no_route_without_the_route_secret(tmp_path: Path) -> None:
    users = make_users(tmp_path / "auth", PREFIX, load_team(_team(tmp_path)))
    with open_network(wanted=False) as network:
        nodes = await start_nodes(tmp_path / "nats", network, users)  # routed: they know it
        try:
            node = nodes[0].server
            assert node.cluster_port is not None
            # A local process posing as a fourth node, to inject a run past every user's
            # rights (RMSG is how a route forwards a message).
            answer = await _hello(node.host, node.cluster_port,
                                  {"name": "intruder", "cluster": node.cluster_name},
                                  f"RMSG $G {PREFIX}.run.submit 2\r\n{{}}\r\n".encode())
            assert answer.startswith(b"-ERR 'Authorization Violation'"), answer
            # Logged as a route's refused login: the report notes those (a node of the
            # cluster coming back may have one refused too), users' refusals fail it.
            found = await _logged([n.server.log_path for n in nodes], bool, routes=True)
        finally:
            stop_nodes(nodes)
    assert any("authentication error" in f for f in found), found


async def _line(stream: anyio.abc.SocketStream) -> bytes:
    data = b""
    with anyio.fail_after(LOG_WAIT):
        while not data.endswith(b"\r\n"):
            data += await stream.receive(1)
    return data
