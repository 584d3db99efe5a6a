"""Running plancast's commands and the examples as real subprocesses, from async tests."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.abc

from protocols import RunEvent, decoder_for

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
PLANCAST = str(Path(sys.executable).parent / "plancast")
TIMEOUT = 90.0
"""A guard against a hung command (the test fails instead of waiting for pytest's timeout)."""
DATA_DIR = tempfile.mkdtemp(prefix="plancast-tests-")
"""The data directory of commands not given one: a ``plancast up`` the person running the
tests keeps in their own is not the tests' local deployment."""
SCRIPTED_TEAM = """
[models.scripted]
model = "scripted-model"
base_url = "{base_url}"
[roles.planner]
kind = "planner"
model = "scripted"
[roles.worker]
tools = ["echo"]
tool_steps_only = true
[roles.synthesizer]
kind = "synthesizer"
model = "scripted"
"""
"""A team file for ``plancast`` children: planner, an ``echo`` worker and a synthesizer, all
on the scripted model at ``base_url``."""


def clean_env(**extra: str) -> dict[str, str]:
    """The test's environment without settings that would redirect a command, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NATS_", "PLANCAST_", "OPENAI_"))
           or k == "PLANCAST_MAX_STREAM_BYTES"}  # the shared server reserves each stream's
    return {**env, "PLANCAST_DATA_DIR": DATA_DIR, **extra}


async def run(*argv: str, cwd: Path, env: dict[str, str] | None = None,
              ) -> subprocess.CompletedProcess[bytes]:
    """Run a command to its end (the test's event loop keeps serving meanwhile)."""
    with anyio.fail_after(TIMEOUT):
        return await anyio.run_process(list(argv), cwd=cwd, check=False, env=env or clean_env())


async def plancast(*args: str, cwd: Path, env: dict[str, str] | None = None,
                   ) -> subprocess.CompletedProcess[bytes]:
    """Run the installed ``plancast`` script."""
    return await run(PLANCAST, *args, cwd=cwd, env=env)


def events_of(result: subprocess.CompletedProcess[bytes]) -> list[RunEvent]:
    """Every stdout line must be one documented event, and nothing else."""
    lines = result.stdout.decode().splitlines()
    assert lines, f"no output; stderr: {result.stderr.decode()[-2000:]}"
    decoder = decoder_for(RunEvent)
    return [decoder.decode(line) for line in lines]


def stderr_tail(result: subprocess.CompletedProcess[bytes]) -> str:
    return result.stderr.decode(errors="replace")[-2000:]


def shell_env(**extra: str) -> dict[str, str]:
    """``clean_env`` with this environment's ``plancast`` first on PATH: for commands run
    as a document writes them (``bash -c 'plancast run …'``)."""
    env = clean_env(**extra)
    return {**env, "PATH": f"{Path(PLANCAST).parent}{os.pathsep}{env.get('PATH', '')}"}


class Background:
    """A long-running command (``plancast scripted-model``) started as a document writes
    it: ``await started.says(text)`` waits for a line of its output; ``stop()`` sends
    SIGTERM and returns its exit code."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        self.output = bytearray()
        self.closed = False
        """Its output has ended (it exited, or closed stdout)."""
        self._more = anyio.Event()

    async def read(self) -> None:
        assert self.process.stdout is not None
        async for chunk in self.process.stdout:
            self.output += chunk
            self._more.set()
            self._more = anyio.Event()
        self.closed = True
        self._more.set()

    async def says(self, text: str, timeout: float = 30.0) -> str:
        """The first line of output containing ``text`` (waits for it, within ``timeout``)."""
        with anyio.fail_after(timeout):
            while True:
                for line in self.output.decode(errors="replace").splitlines():
                    if text in line:
                        return line
                if self.closed:
                    raise AssertionError(f"it ended saying: {self.output.decode()[-2000:]}")
                await self._more.wait()

    async def stop(self, timeout: float = 30.0) -> int:
        if self.process.returncode is None:
            self.process.terminate()
        with anyio.fail_after(timeout):
            return await self.process.wait()


@contextlib.asynccontextmanager
async def background(command: str, *, cwd: Path, env: dict[str, str]
                     ) -> AsyncIterator[Background]:
    """Run a shell command line in the background for the block (output merged)."""
    process = await anyio.open_process(["bash", "-c", f"exec {command}"], cwd=cwd, env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    started = Background(process)
    async with anyio.create_task_group() as group:
        group.start_soon(started.read)
        try:
            yield started
        finally:
            with anyio.CancelScope(shield=True):
                if process.returncode is None:
                    process.kill()
                await process.wait()
            group.cancel_scope.cancel()
