"""The bus alone at the concurrent suite's load: many runs of one DAG at once, nothing but
the messages plancast stores per step.

Per step: its task, a stored message of its own in a work-queue stream on file, acknowledged
by the executor; its result, stored (the results of one run that end in one event-loop turn
in one message, as plancast sends them); and one stored event message. No submission, run
record, plan, synthesis, state write, fence or recovery: the floor under the concurrent
suite's figures, not a runtime. As in plancast, a "planner" child process sends each run's
tasks as their dependencies finish and an "executor" child process (``benchmarks.floor``'s)
runs them, so the benchmark's process only starts a burst and reads the processes' CPU.

``python -m benchmarks.floor_concurrent NATS_URL NAME WIDTH`` is the planner child: on each
``go RUNS`` line on its stdin it runs RUNS runs of a no-op 1 → WIDTH → 1 fan-out at once and
answers ``done SECONDS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import msgspec
import nats
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import api

from runtime.worker import backend_options

from .config import BenchConfig
from .dag import Dag
from .floor import ROOT, RUN_TIMEOUT, Tasks, _pull
from .workers import cpu_seconds
from .workloads import fan_out

STRIDE = 1_000
"""A step's id on the wire: run number * STRIDE + its id in the DAG (DAGs here are small)."""


class Burst:
    """The planner child's work: sends each run's tasks as their dependencies finish."""

    def __init__(self, nc: Client, name: str, dag: Dag) -> None:
        self.nc, self.js, self.name, self.dag = nc, nc.jetstream(), name, dag
        self.done: asyncio.Queue[list[int]] = asyncio.Queue()
        self.decoder = msgspec.msgpack.Decoder(list[int])
        self.next_run = 0

    async def listen(self) -> None:
        async def got(msg: Msg) -> None:
            if msg.data:  # not a pull request's status message
                self.done.put_nowait(self.decoder.decode(msg.data))

        inbox = self.nc.new_inbox()
        await self.nc.subscribe(inbox, cb=got)
        await _pull(self.nc, f"{self.name}R", "planner", inbox)
        await self.nc.flush()

    async def send(self, run: int, ready: list[int]) -> None:
        """Each ready step's task as a stored message of its own."""
        reply = f"{self.name}.result.{run}"
        for step_id in ready:
            tasks = Tasks([(run * STRIDE + step_id, self.dag.by_id[step_id].seconds)], reply,
                          stored=True)
            await self.js.publish_async(f"{self.name}.task", msgspec.msgpack.encode(tasks))

    async def run(self, runs: int) -> float:
        """Seconds from the first task sent to the last step's result, every message
        acknowledged by the server."""
        first, self.next_run = self.next_run, self.next_run + runs
        waiting = {run: {n.id: len(n.deps) for n in self.dag.nodes}
                   for run in range(first, first + runs)}
        left = {run: len(self.dag) for run in waiting}
        started = time.perf_counter()
        for run, deps in waiting.items():
            await self.send(run, [sid for sid, count in deps.items() if count == 0])
        with anyio.fail_after(RUN_TIMEOUT):
            while left:
                ended = await self.done.get()
                for wire_id in ended:
                    run, step_id = divmod(wire_id, STRIDE)
                    await self.js.publish_async(f"{self.name}.event.{run}",
                                                msgspec.msgpack.encode(wire_id))
                    ready = []
                    for dependent in self.dag.dependents[step_id]:
                        waiting[run][dependent] -= 1
                        if waiting[run][dependent] == 0:
                            ready.append(dependent)
                    if ready:
                        await self.send(run, ready)
                    left[run] -= 1
                    if not left[run]:
                        del left[run], waiting[run]
            await self.js.publish_async_completed()
        return time.perf_counter() - started


async def planner(url: str, name: str, width: int) -> None:
    """The child: runs a burst per ``go RUNS`` line until its stdin closes."""
    nc = await nats.connect(url)
    burst = Burst(nc, name, fan_out(width))
    await burst.listen()
    print("ready", flush=True)
    while line := await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True):
        wall = await burst.run(int(line.split()[1]))
        print(f"done {wall}", flush=True)
    await nc.close()


@dataclass
class Deployment:
    """The floor's children, started on their own streams."""

    name: str
    js: Any
    planner: Process
    executor: Process
    planner_out: BufferedByteReceiveStream

    async def stored(self) -> dict[str, int]:
        """Messages each stream holds, and every task sent (the work queue removes the
        acknowledged)."""
        tasks, results, events = [(await self.js.stream_info(s)).state for s in
                                  (self.name, f"{self.name}R", f"{self.name}E")]
        return {"tasks_sent": tasks.last_seq, "tasks_held": tasks.messages,
                "results": results.messages, "events": events.messages}

    async def burst(self, runs: int) -> float:
        assert self.planner.stdin is not None
        await self.planner.stdin.send(f"go {runs}\n".encode())
        line = await _line(self.planner_out, RUN_TIMEOUT + 10)
        if not line.startswith("done "):
            raise RuntimeError(f"the concurrent floor's planner said {line!r}")
        return float(line.split()[1])


async def _line(out: BufferedByteReceiveStream, timeout: float) -> str:
    try:
        with anyio.fail_after(timeout):
            return (await out.receive_until(b"\n", 256)).decode().strip()
    except (anyio.IncompleteRead, anyio.DelimiterNotFound):
        return ""  # its own error, if any, is on stderr above


async def _child(args: list[str]) -> tuple[Process, BufferedByteReceiveStream]:
    """A child of ours, once it has said ``ready``."""
    child = await anyio.open_process([sys.executable, "-m", *args], cwd=ROOT)
    assert child.stdout is not None
    out = BufferedByteReceiveStream(child.stdout)
    line = await _line(out, 60)
    if line != "ready":
        child.kill()
        await child.aclose()
        raise RuntimeError(f"the concurrent floor's {args[0]} did not start (it said {line!r})")
    return child, out


@contextlib.asynccontextmanager
async def deployment(nats_url: str, name: str, width: int) -> AsyncIterator[Deployment]:
    """The floor's three streams (tasks, results, events) and its two child processes."""
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    file = api.StorageType.FILE
    await js.add_stream(api.StreamConfig(name=name, subjects=[f"{name}.task"], storage=file,
                                         retention=api.RetentionPolicy.WORK_QUEUE))
    await js.add_consumer(name, api.ConsumerConfig(
        durable_name="executor", ack_policy=api.AckPolicy.EXPLICIT, max_ack_pending=-1))
    await js.add_stream(api.StreamConfig(name=f"{name}R", subjects=[f"{name}.result.>"],
                                         storage=file))
    await js.add_consumer(f"{name}R", api.ConsumerConfig(
        durable_name="planner", ack_policy=api.AckPolicy.NONE))
    await js.add_stream(api.StreamConfig(name=f"{name}E", subjects=[f"{name}.event.>"],
                                         storage=file))
    children: list[Process] = []
    try:
        executor, _ = await _child(["benchmarks.floor", nats_url, name])
        children.append(executor)
        planner_child, out = await _child(["benchmarks.floor_concurrent", nats_url, name,
                                           str(width)])
        children.append(planner_child)
        yield Deployment(name, js, planner_child, executor, out)
    finally:
        for child in children:
            child.kill()
            await child.aclose()
        for stream in (name, f"{name}R", f"{name}E"):
            await js.delete_stream(stream)
        await nc.close()


async def run_concurrent_floor(nats_url: str, config: BenchConfig, server_pid: int | None,
                               progress: Callable[[str], None]) -> dict[str, Any]:
    """One burst of ``config.concurrent_runs`` runs at once (after a warm-up of two), with
    each process's CPU seconds over it."""
    dag = fan_out(config.concurrent_width)
    async with deployment(nats_url, f"cfloor{time.time_ns()}", config.concurrent_width) as d:
        await d.burst(2)  # warm-up
        pids = {"planner": d.planner.pid, "executor": d.executor.pid, "nats": server_pid,
                "bench": os.getpid()}
        before = {k: cpu_seconds(pid) for k, pid in pids.items() if pid}
        wall = await d.burst(config.concurrent_runs)
        cpu = {f"cpu_{k}_s": cpu_seconds(pids[k]) - v for k, v in before.items()}
    steps = config.concurrent_runs * len(dag)
    progress(f"concurrent: bus alone: {steps / wall:.0f} steps/s")
    return {"what": "bus alone (stored)", "planners": 1, "runs": config.concurrent_runs,
            "steps_per_run": len(dag), "wall_s": wall, "steps_per_s": steps / wall,
            "planner_cpu_us": cpu["cpu_planner_s"] / steps * 1e6, **cpu}


if __name__ == "__main__":  # on the event loop plancast's workers use
    anyio.run(planner, sys.argv[1], sys.argv[2], int(sys.argv[3]), backend="asyncio",
              backend_options=backend_options())
