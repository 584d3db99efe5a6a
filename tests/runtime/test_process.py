"""A process serving actors (``runtime.worker.process``), run as a real child process and stopped
with a real signal."""

from __future__ import annotations

import signal
import subprocess

import anyio
import pytest

from ..subprocesses import PYTHON, ROOT, clean_env

pytestmark = pytest.mark.anyio

SLOW_START = """
import sys
import anyio
from runtime.bus import open_bus
from runtime.worker import serve_actors
from runtime.config import Settings
from tests.runtime.echo_actor import EchoActor

class SlowStart(EchoActor):
    async def serve(self, *, task_status=anyio.TASK_STATUS_IGNORED):
        print("STARTING", flush=True)  # a worker still binding its consumers, say
        await anyio.sleep(2.0)
        await super().serve(task_status=task_status)

async def main():
    async with open_bus(Settings()) as bus:
        await serve_actors([SlowStart(bus)])
    print("DRAINED", flush=True)

anyio.run(main)
"""


async def test_a_sigterm_while_the_actors_still_start_drains_them(
    nats_url: str, prefix: str
) -> None:
    """The signal is handled from the start: before, it was only once every actor served,
    and a worker that said "serving" while one still started died of the signal (exit -15)
    instead of draining (a CI run of the multi-machine recipe)."""
    env = clean_env(NATS_URL=nats_url, PLANCAST_PREFIX=prefix, PYTHONPATH=str(ROOT))
    proc = await anyio.open_process([PYTHON, "-c", SLOW_START], cwd=ROOT, env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = b""
    try:
        assert proc.stdout is not None
        with anyio.fail_after(30):
            while b"STARTING" not in out:
                out += await proc.stdout.receive()
            proc.send_signal(signal.SIGTERM)
            async for chunk in proc.stdout:
                out += chunk
            code = await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert code == 0, out.decode(errors="replace")[-2000:]
    assert b"DRAINED" in out
