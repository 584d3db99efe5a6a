"""Roles in child processes: ``plancast worker`` as a child we start, wait for, measure and stop.

A child's CPU time is read from ``/proc/<pid>/stat``, so what this process does (following
events, serving the scripted model) is never counted as the child's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import anyio
import nats.errors
from nats.js.errors import NotFoundError

from protocols import Stream, Verb, stream_name, subject
from runtime.bus import Bus


def worker_command(role: str | list[str], team_file: Path, nats_url: str,
                   prefix: str) -> list[str]:
    """``plancast worker ...`` from this interpreter's environment."""
    script = Path(sys.executable).parent / "plancast"
    if not script.exists():
        script = Path(shutil.which("plancast") or "plancast")
    roles = [role] if isinstance(role, str) else role
    return [str(script), "worker", *(a for r in roles for a in ("--role", r)),
            "--team", str(team_file), "--nats", nats_url, "--prefix", prefix]


@contextmanager
def worker_process(role: str | list[str], team_file: Path, nats_url: str, prefix: str,
                   log_file: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Run a worker until the block ends, then SIGTERM it (it drains) and reap it."""
    with log_file.open("wb") as log:
        proc = subprocess.Popen(worker_command(role, team_file, nats_url, prefix),
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def _check_alive(proc: subprocess.Popen[bytes], log_file: Path) -> None:
    """Raise with the end of its log if the worker has exited."""
    if proc.poll() is not None:
        log = await anyio.Path(log_file).read_text(errors="replace")
        raise RuntimeError(f"the worker exited with {proc.returncode}:\n{log[-2000:]}")


async def wait_for_consumer(bus: Bus, consumer: str, proc: subprocess.Popen[bytes],
                            log_file: Path, timeout: float = 60.0) -> None:
    """Wait until the worker has created its work-queue consumer (it is pulling then)."""
    stream = stream_name(bus.prefix, Stream.WORK)
    with anyio.move_on_after(timeout):
        while True:
            await _check_alive(proc, log_file)
            try:
                await bus.js.consumer_info(stream, consumer)
                return
            except NotFoundError:
                await anyio.sleep(0.1)
    raise RuntimeError(f"the worker made no consumer {consumer!r} within {timeout:g} s; "
                       f"see {log_file}")

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
"""Clock ticks per second: ``cpu_seconds`` moves in steps of 1 / CLOCK_TICKS."""


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process, from /proc (Linux; in clock ticks, 10 ms
    on most kernels)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


async def wait_for_planners(bus: Bus, planners: Sequence[tuple[subprocess.Popen[bytes], Path]],
                            timeout: float = 60.0) -> None:
    """Until as many planners as ``planners`` (process, log file) answer heartbeats: each
    has subscribed to submissions then. Raises if one exits or the time runs out."""
    seen: set[str] = set()
    sub = await bus.nc.subscribe(subject(bus.prefix, Verb.HEARTBEAT, "planner", "*",
                                         wildcard=True))
    try:
        with anyio.move_on_after(timeout):
            while len(seen) < len(planners):
                for proc, log_file in planners:
                    await _check_alive(proc, log_file)
                with contextlib.suppress(nats.errors.TimeoutError):
                    seen.add((await sub.next_msg(timeout=0.5)).subject)
            return
    finally:
        await sub.unsubscribe()
    raise RuntimeError(f"{len(seen)} of {len(planners)} planner(s) sent heartbeats within "
                       f"{timeout:g} s; see {', '.join(str(log) for _, log in planners)}")
