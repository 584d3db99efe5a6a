"""The seeded fault loop: one fault every few seconds, every kind in turn.

Each round shuffles the kinds (seeded) and injects each once, so every kind gets the
same share. A fault is injected at once and healed later in its own task, so faults
overlap; but one node-level fault (node stop, node kill, partition) at a time, and the
next only once the cluster is healthy again (every node current, a meta leader) or after
``recovery_wait``, so the cluster mostly keeps its quorum: one failure at a time. A
process under a fault is not picked again until it is healed.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import anyio

from .cluster import Node, cluster_ready
from .fleet import Fleet, Member, StartFailed
from .netns import Network

KINDS = ("actor_kill", "actor_stop", "node_stop", "node_kill", "partition")
NODE_KINDS = {"node_stop", "node_kill", "partition"}
DURATIONS = {"actor_kill": (0.5, 3.0), "actor_stop": (1.0, 15.0), "node_stop": (1.0, 10.0),
             "node_kill": (2.0, 5.0), "partition": (10.0, 20.0)}
"""Seconds each kind holds (uniform, seeded): the stop, the delay before a restart, the cut."""
RESTART_TRIES = 5
RECOVERY_WAIT = 20.0
"""Seconds a healed node fault waits at most for the cluster to be healthy again before
the next node fault may strike (after a partition, every stream and consumer on the cut
node catching up took 16-47 s here; past this wait, two failures overlap, and the report
counts how often)."""


@dataclass
class Fault:
    kind: str
    target: str
    start: float
    """Unix time it was injected."""
    seconds: float
    """How long it was meant to hold (the stop, the restart delay, the cut)."""
    end: float = 0.0
    """Unix time it was healed (the process or node serves again, the link is up)."""
    error: str = ""
    """What went wrong while healing, if anything."""
    recovered: float = 0.0
    """Node faults: Unix time the cluster was healthy again after healing (0: not within
    the loop's recovery wait)."""

    def describe(self) -> str:
        healed = f"healed after {self.end - self.start:.1f}s" if self.end else "not healed"
        if self.recovered:
            healed += f", cluster healthy {self.recovered - self.end:.1f}s later"
        return f"{self.kind} {self.target} for {self.seconds:.1f}s, {healed}" + (
            f" ({self.error})" if self.error else "")


class FaultLoop:
    def __init__(self, *, rng: random.Random, fleet: Fleet, nodes: Sequence[Node],
                 network: Network, per_kind: int, pace: tuple[float, float] = (3.0, 6.0),
                 kinds: Sequence[str] = KINDS, recovery_wait: float = RECOVERY_WAIT,
                 log: Callable[[str], None] = print) -> None:
        self.rng = rng
        self.fleet = fleet
        self.nodes = list(nodes)
        self.network = network
        self.per_kind = per_kind
        self.pace = pace
        self.kinds = [k for k in kinds if k != "partition" or not network.unavailable]
        self.unavailable = {"partition": network.unavailable} \
            if "partition" in kinds and network.unavailable else {}
        self.recovery_wait = recovery_wait
        self.log = log
        self.faults: list[Fault] = []
        self._node_slot = anyio.Semaphore(1)
        """Held by the one node-level fault in progress."""
        self._injected = anyio.Event()
        self.done = False

    @property
    def total(self) -> int:
        return self.per_kind * len(self.kinds)

    async def injected(self, count: int) -> None:
        """Return once ``count`` faults were injected (or the loop is over)."""
        while len(self.faults) < count and not self.done:
            await self._injected.wait()

    async def run(self) -> None:
        """Inject ``per_kind`` faults of each kind; returns once every one is healed."""
        try:
            await self._run()
        finally:
            self.done = True
            self._injected.set()

    async def _run(self) -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(self.per_kind):
                order = list(self.kinds)
                self.rng.shuffle(order)
                for kind in order:
                    await anyio.sleep(self.rng.uniform(*self.pace))
                    if kind in NODE_KINDS:
                        await self._node_slot.acquire()  # released when that fault heals
                    tg.start_soon(getattr(self, f"_{kind}"), self._pick(kind))

    def _pick(self, kind: str) -> Fault:
        """Choose the target and the duration now, so the seed decides them."""
        if kind in NODE_KINDS:
            if kind == "partition":  # the side: n3 and the actors next to it
                target = f"{next(n.name for n in self.nodes if n.side)}+side"
            else:
                target = self.rng.choice(self.nodes).name
        else:
            free = [m for m in self.fleet.members if not m.faulted and m.alive]
            member = self.rng.choice(free)
            member.faulted = True
            target = member.name
        fault = Fault(kind, target, time.time(), self.rng.uniform(*DURATIONS[kind]))
        self.faults.append(fault)
        self._injected.set()
        self._injected = anyio.Event()
        return fault

    def _member(self, fault: Fault) -> Member:
        return next(m for m in self.fleet.members if m.name == fault.target)

    def _node(self, fault: Fault) -> Node:
        return next(n for n in self.nodes if fault.target.startswith(n.name))

    def _healed(self, fault: Fault) -> None:
        fault.end = time.time()
        self.log(f"fault healed: {fault.describe()}")

    async def _node_done(self, fault: Fault) -> None:
        """Wait until the cluster is healthy again, then let the next node fault in."""
        try:
            with anyio.move_on_after(self.recovery_wait):
                # Servers have no event to wait on: poll their monitoring endpoints.
                while not await anyio.to_thread.run_sync(  # noqa: ASYNC110
                        cluster_ready, self.nodes):
                    await anyio.sleep(0.5)
                fault.recovered = time.time()
            if not fault.recovered:
                note = f"the cluster was not healthy {self.recovery_wait:.0f}s after healing"
                fault.error = f"{fault.error}; {note}" if fault.error else note
                self.log(f"fault: {fault.kind} {fault.target}: {note}")
        finally:
            self._node_slot.release()

    async def _actor_kill(self, fault: Fault) -> None:
        member = self._member(fault)
        pid = member.proc.pid if member.proc else 0
        self.fleet.kill(member)
        self.log(f"fault: SIGKILL {member.name} (pid {pid}); restart in {fault.seconds:.1f}s")
        try:
            await anyio.sleep(fault.seconds)
            await self._restart(member, fault)
        finally:
            member.faulted = False
        self._healed(fault)

    async def _restart(self, member: Member, fault: Fault) -> None:
        for attempt in range(1, RESTART_TRIES + 1):
            try:
                await self.fleet.start(member)
                return
            except StartFailed as exc:
                fault.error = f"restart {attempt} failed: {exc}"
                self.log(f"fault: {fault.error}")
                await anyio.sleep(2.0)

    async def _actor_stop(self, fault: Fault) -> None:
        member = self._member(fault)
        self.fleet.stop(member)
        pid = member.proc.pid if member.proc else 0
        self.log(f"fault: SIGSTOP {member.name} (pid {pid}) for {fault.seconds:.1f}s")
        try:
            await anyio.sleep(fault.seconds)
            self.fleet.cont(member)
        finally:
            member.faulted = False
        self._healed(fault)

    async def _node_stop(self, fault: Fault) -> None:
        node = self._node(fault)
        node.stop()
        self.log(f"fault: SIGSTOP node {node.name} for {fault.seconds:.1f}s")
        try:
            await anyio.sleep(fault.seconds)
            node.cont()
        finally:
            self._healed(fault)
            await self._node_done(fault)

    async def _node_kill(self, fault: Fault) -> None:
        node = self._node(fault)
        node.kill()
        self.log(f"fault: SIGKILL node {node.name}; restart in {fault.seconds:.1f}s")
        try:
            await anyio.sleep(fault.seconds)
            try:
                await node.start()
            except Exception as exc:  # reported; the suite goes on with two nodes
                fault.error = f"restart failed: {exc}"
                self.log(f"fault: node {node.name} {fault.error}")
        finally:
            self._healed(fault)
            await self._node_done(fault)

    async def _partition(self, fault: Fault) -> None:
        self.network.cut()
        side = [m.name for m in self.fleet.members if m.side]
        self.log(f"fault: partition: {fault.target} ({', '.join(side)}) cut off for "
                 f"{fault.seconds:.1f}s")
        try:
            await anyio.sleep(fault.seconds)
        finally:
            self.network.heal()
            self._healed(fault)
            await self._node_done(fault)
