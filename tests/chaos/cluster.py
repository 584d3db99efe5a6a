"""Three JetStream nodes for the chaos suite: n1 and n2 in the root namespace, n3 on the side.

Like ``runtime.embedded.start_cluster``, but each node listens where its namespace puts
it, n3's process runs inside the side namespace, and the nodes ping their routes and
clients every second, so a connection that went silent in a partition is dropped within
seconds instead of the default two minutes (the route then re-forms once healed). With
per-role users, each node includes their ``authorization`` block and its routes
authenticate to each other (``tests.chaos.users``).
"""

from __future__ import annotations

import functools
import os
import signal
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runtime._proc import wait_ready_off_loop
from runtime.bus import (
    NatsServerProcess,
    cluster_formed,
    find_nats_server,
    free_ports,
    meta_leader_elected,
)

from .netns import Network
from .users import Users

NODE_PINGS = ('ping_interval: "1s"', "ping_max: 3")
"""Server-side pings: a node drops a silent route or client after about three seconds."""
READY_TIMEOUT = 60.0


@dataclass(eq=False)
class _AuthorizedNode(NatsServerProcess):
    """A node whose ``cluster`` section takes only routes that present the route secret."""

    route_authorization: str = field(default="", kw_only=True)

    def _config(self) -> str:
        config = super()._config()
        if not self.route_authorization:
            return config
        return config.replace("cluster {\n", f"cluster {{\n  {self.route_authorization}\n", 1)


class Node:
    """One cluster node and the signals the fault loop sends it."""

    def __init__(self, server: NatsServerProcess, *, side: bool) -> None:
        self.server = server
        self.side = side
        self.name = server.server_name or "?"
        self.stopped = False

    @property
    def url(self) -> str:
        return self.server.url

    def kill(self) -> None:
        self.server.kill()

    def stop(self) -> None:
        os.kill(self.server.pid, signal.SIGSTOP)
        self.stopped = True

    def cont(self) -> None:
        os.kill(self.server.pid, signal.SIGCONT)
        self.stopped = False

    async def start(self) -> None:
        """(Re)start on the same ports; returns once it accepts clients."""
        await self.server.start_async(READY_TIMEOUT)


def _side_executable(base: Path, network: Network) -> str:
    """A wrapper that execs nats-server inside the side namespace (the pid stays the same)."""
    base.mkdir(parents=True, exist_ok=True)
    script = base / "nats-server-side"
    script.write_text(f'#!/bin/sh\nexec {" ".join(network.wrap([find_nats_server()], side=True))}'
                      ' "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


async def start_nodes(base: Path, network: Network, users: Users | None = None, *,
                      pings: bool = True) -> list[Node]:
    """n1, n2 (root) and n3 (side), routed to each other; returns once a meta leader rules.
    With ``users``, clients must log in as one of them and routes with the route secret.
    ``pings=False``: nats-server's default pings (a silent peer is noticed after minutes),
    as a deployment that did not tune them has."""
    hosts = [network.root_addr, network.root_addr, network.side_addr]
    ports = free_ports(3)
    routes = [users.route_url(h, p) if users else f"nats-route://{h}:{p}"
              for h, p in zip(hosts, ports, strict=True)]
    nodes = []
    for i, (host, port, route) in enumerate(zip(hosts, ports, routes, strict=True), start=1):
        side = i == 3 and network.namespace is not None
        executable = _side_executable(base, network) if side else find_nats_server()
        data_dir = base / f"n{i}"
        server = _AuthorizedNode(
            data_dir, host=host, server_name=f"n{i}", cluster_port=port,
            routes=[r for r in routes if r != route], executable=executable,
            extra_config=[*(NODE_PINGS if pings else ()),
                          *([users.include(data_dir)] if users else [])],
            route_authorization=users.route_authorization() if users else "")
        nodes.append(Node(server, side=side))
    try:
        for node in nodes:
            await node.start()
        elected = functools.partial(meta_leader_elected, [n.server for n in nodes],
                                    timeout=READY_TIMEOUT)
        await wait_ready_off_loop(elected, time.monotonic() + READY_TIMEOUT, 0.2)
    except BaseException:
        for node in nodes:
            node.kill()
        raise
    return nodes


def cluster_ready(nodes: Sequence[Node]) -> bool:
    """Every node is healthy and they agree on a meta leader that has all peers current."""
    return cluster_formed([node.server for node in nodes])


def stop_nodes(nodes: Sequence[Node]) -> None:
    for node in nodes:
        if node.stopped:
            node.cont()
        node.server.stop()
