"""Executors in a separate process: ``plancast worker`` as a child we start and stop."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
from nats.js.errors import NotFoundError

from protocols import Stream, stream_name
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


async def wait_for_consumer(bus: Bus, consumer: str, proc: subprocess.Popen[bytes],
                            log_file: Path, timeout: float = 60.0) -> None:
    """Wait until the worker has created its work-queue consumer (it is pulling then)."""
    stream = stream_name(bus.prefix, Stream.WORK)
    with anyio.fail_after(timeout):
        while True:
            if proc.poll() is not None:
                log = await anyio.Path(log_file).read_text(errors="replace")
                raise RuntimeError(f"the worker exited with {proc.returncode}:\n{log[-2000:]}")
            try:
                await bus.js.consumer_info(stream, consumer)
                return
            except NotFoundError:
                await anyio.sleep(0.1)
