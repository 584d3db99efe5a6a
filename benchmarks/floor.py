"""The bus alone: the timed workloads run by the least a coordinator over NATS can do.

No planning, no events, no state, no model calls and no recovery: this process sends each
step's task once its dependencies are done, a child process sleeps the step's time and
answers, the steps that end in the same event-loop turn in one message. It is the floor
under plancast's figures on this machine (what three process hops per layer and the
server's storing cost before any runtime work), not a runtime. Four ways, in the same run:
``stored`` sends every task as a stored JetStream message of its own (a work-queue stream
on file) and the results of one moment as one, as plancast does; ``recorded`` also writes
the two records of each finished attempt plancast's executor writes before it answers
(its claim, then its result over it, each with the expected-last-sequence check, awaited
in turn: ``actors.finished``); ``grouped`` sends the tasks that become ready together as
one stored message; ``core`` stores nothing (core NATS).

``python -m benchmarks.floor NATS_URL NAME`` is the child that runs the steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import msgspec
import nats
from anyio.streams.buffered import BufferedByteReceiveStream
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import api

from runtime.worker import backend_options

from .config import BenchConfig
from .dag import Dag
from .suite_overhead import summarize

MODES = ("stored", "recorded", "grouped", "core")
RUN_TIMEOUT = 120.0
"""Seconds a run may take before the measurement fails, saying so."""
FOREVER_NS = 3_600 * 10**9
"""A pull request's expiry: longer than any benchmark."""
ROOT = Path(__file__).resolve().parents[1]
"""Where the child can import ``benchmarks`` from."""


class Tasks(msgspec.Struct, array_like=True):
    steps: list[tuple[int, float]]
    """(step id, seconds) of each step to run."""
    reply: str
    """Where each step's id goes when it is done."""
    stored: bool
    records: str = ""
    """The subject prefix of the run's records of finished attempts ("": none kept)."""


def _subjects(name: str) -> tuple[str, str, str]:
    """(stored tasks, stored results, core tasks)."""
    return f"{name}.task", f"{name}.result", f"{name}.core"


EXPECT = "Nats-Expected-Last-Subject-Sequence"


async def _pull(nc: Client, stream: str, consumer: str, inbox: str) -> None:
    """One pull request for everything that will come: no round trip per message."""
    request = msgspec.json.encode({"batch": 10**7, "expires": FOREVER_NS})
    await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}", request, reply=inbox)


async def executor(url: str, name: str) -> None:
    """The child: runs every task it gets, each step in a task of its own, until its stdin
    closes."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    core_subject = _subjects(name)[2]
    decoder = msgspec.msgpack.Decoder(Tasks)

    running: set[asyncio.Task[None]] = set()
    ended: dict[tuple[str, bool], list[int]] = {}
    """Per (reply subject, stored): the steps that ended in this event-loop turn."""

    def spawn(work: Any) -> None:
        task = asyncio.ensure_future(work)
        running.add(task)
        task.add_done_callback(running.discard)

    def answer(key: tuple[str, bool]) -> None:
        body = msgspec.msgpack.encode(ended.pop(key))
        reply, stored = key
        spawn(js.publish(reply, body) if stored else nc.publish(reply, body))

    async def step(tasks: Tasks, step_id: int, seconds: float) -> None:
        record = f"{tasks.records}.{step_id}"  # the attempt's claim, then its result over it
        claim = await js.publish(record, b"claim", headers={EXPECT: "0"}) \
            if tasks.records else None
        await asyncio.sleep(seconds)
        if claim is not None:
            await js.publish(record, b"result", headers={EXPECT: str(claim.seq)})
        key = (tasks.reply, tasks.stored)
        if key not in ended:
            ended[key] = []
            asyncio.get_running_loop().call_soon(answer, key)
        ended[key].append(step_id)

    async def run(msg: Msg) -> None:
        tasks = decoder.decode(msg.data)
        await asyncio.gather(*(step(tasks, sid, sec) for sid, sec in tasks.steps))
        if tasks.stored:
            await msg.ack()

    async def take(msg: Msg) -> None:
        if msg.data:  # not a pull request's status message
            spawn(run(msg))

    await nc.subscribe(core_subject, cb=take)
    inbox = nc.new_inbox()
    await nc.subscribe(inbox, cb=take)
    await _pull(nc, name, "executor", inbox)
    await nc.flush()
    print("ready", flush=True)
    # until the benchmark closes our stdin: when it ends or dies, so do we
    await anyio.to_thread.run_sync(sys.stdin.buffer.read, abandon_on_cancel=True)


class Coordinator:
    """Sends a DAG's steps as their dependencies finish; times each run."""

    def __init__(self, nc: Client, name: str) -> None:
        self.nc, self.js = nc, nc.jetstream()
        self.task_subject, self.result_subject, self.core_subject = _subjects(name)
        self.core_inbox = nc.new_inbox()
        self.done: asyncio.Queue[list[int]] = asyncio.Queue()
        self.records = f"{name}F"
        self.runs = 0
        self.decoder = msgspec.msgpack.Decoder(list[int])

    async def listen(self, name: str) -> None:
        async def got(msg: Msg) -> None:
            if msg.data:
                self.done.put_nowait(self.decoder.decode(msg.data))

        await self.nc.subscribe(self.core_inbox, cb=got)
        inbox = self.nc.new_inbox()
        await self.nc.subscribe(inbox, cb=got)
        await _pull(self.nc, f"{name}R", "coordinator", inbox)
        await self.nc.flush()

    async def send(self, mode: str, dag: Dag, ready: Sequence[int]) -> None:
        steps = [(sid, dag.by_id[sid].seconds) for sid in ready]
        if mode == "core":
            tasks = Tasks(steps, self.core_inbox, stored=False)
            await self.nc.publish(self.core_subject, msgspec.msgpack.encode(tasks))
            return
        groups = [steps] if mode == "grouped" else [[s] for s in steps]
        records = f"{self.records}.{self.runs}" if mode == "recorded" else ""
        for group in groups:  # the acknowledgements are not waited for: a floor
            tasks = Tasks(group, self.result_subject, stored=True, records=records)
            await self.js.publish_async(self.task_subject, msgspec.msgpack.encode(tasks))

    async def run(self, mode: str, dag: Dag) -> float:
        """Wall seconds from the first task sent to the last step done."""
        waiting = {n.id: len(n.deps) for n in dag.nodes}
        self.runs += 1
        started = time.perf_counter()
        await self.send(mode, dag, [sid for sid, deps in waiting.items() if deps == 0])
        left = len(dag)
        with anyio.fail_after(RUN_TIMEOUT):
            while left:
                ended = await self.done.get()
                left -= len(ended)
                ready = []
                for step_id in ended:
                    for dependent in dag.dependents[step_id]:
                        waiting[dependent] -= 1
                        if waiting[dependent] == 0:
                            ready.append(dependent)
                if ready:
                    await self.send(mode, dag, ready)
        return time.perf_counter() - started


@contextlib.asynccontextmanager
async def deployment(nats_url: str, name: str) -> AsyncIterator[Coordinator]:
    """The floor's two streams, the child running steps, and the coordinator."""
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await js.add_stream(api.StreamConfig(
        name=name, subjects=[f"{name}.task"], retention=api.RetentionPolicy.WORK_QUEUE,
        storage=api.StorageType.FILE))
    await js.add_consumer(name, api.ConsumerConfig(
        durable_name="executor", ack_policy=api.AckPolicy.EXPLICIT, max_ack_pending=-1))
    await js.add_stream(api.StreamConfig(
        name=f"{name}R", subjects=[f"{name}.result"], storage=api.StorageType.FILE))
    await js.add_consumer(f"{name}R", api.ConsumerConfig(
        durable_name="coordinator", ack_policy=api.AckPolicy.NONE))
    await js.add_stream(api.StreamConfig(  # as plancast's finished stream keeps them
        name=f"{name}F", subjects=[f"{name}F.>"], storage=api.StorageType.FILE,
        max_msgs_per_subject=1))
    child = await anyio.open_process([sys.executable, "-m", "benchmarks.floor", nats_url, name],
                                     cwd=ROOT)
    try:
        assert child.stdout is not None
        try:
            with anyio.fail_after(60):
                line = await BufferedByteReceiveStream(child.stdout).receive_until(b"\n", 64)
        except (anyio.IncompleteRead, anyio.DelimiterNotFound):
            line = b""
        if line.strip() != b"ready":  # its own error, if any, is on stderr above
            raise RuntimeError(f"the floor's executor did not start (it said {line!r})")
        coordinator = Coordinator(nc, name)
        await coordinator.listen(name)
        yield coordinator
    finally:
        child.kill()
        await child.aclose()
        for stream in (name, f"{name}R", f"{name}F"):
            await js.delete_stream(stream)
        await nc.close()


async def run_floor(nats_url: str, dags: Sequence[Dag], config: BenchConfig,
                    progress: Any) -> dict[str, list[dict[str, Any]]]:
    """Per way, one row per workload (the same figures as the peers' rows)."""
    rows: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    async with deployment(nats_url, f"floor{time.time_ns()}") as coordinator:
        for mode in MODES:  # warm-up
            await coordinator.run(mode, dags[0])
        for dag in dags:
            for mode in MODES:
                walls = [await coordinator.run(mode, dag)
                         for _ in range(config.reps_for(len(dag)))]
                rows[mode].append(summarize(dag, walls))
                progress(f"floor: {mode} {dag.name} p50 {rows[mode][-1]['wall_s']:.3f}s")
    return rows


if __name__ == "__main__":  # on the event loop plancast's workers use
    anyio.run(executor, sys.argv[1], sys.argv[2], backend="asyncio",
              backend_options=backend_options())
