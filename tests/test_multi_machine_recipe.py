"""``examples/multi_machine.md`` as written: its shell blocks start a three-node cluster on
loopback, its ``plancast scripted-model`` serves its scenario, its team file (on that model,
no key) and worker commands serve the team, and its ``plancast run`` finishes. Only the
ports change (free ones)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process

from runtime.bus import free_port

from .needs import BWRAP
from .subprocesses import ROOT, clean_env, stderr_tail

RECIPE = ROOT / "examples" / "multi_machine.md"
DOC_PORTS = (4222, 4223, 4224, 6222, 6223, 6224, 8000)


class Recipe:
    """What the recipe says to write and run, its ports replaced by ``ports``."""

    def __init__(self, ports: dict[int, int]) -> None:
        text = RECIPE.read_text()
        for old, new in ports.items():
            text = text.replace(str(old), str(new))
        blocks = re.findall(r"```(\w+)\n(.*?)```", text, re.S)
        shell = [body for lang, body in blocks if lang == "sh"]
        [self.team] = [body for lang, body in blocks if lang == "toml" and "[roles." in body]
        [self.scenario] = [body for lang, body in blocks if lang == "toml" and "[[rules]]" in body]
        [self.cluster] = [b for b in shell if "nats-server" in b]
        [self.exports] = [b for b in shell if "export NATS_URL" in b]
        lines = [line.split("#")[0].strip() for b in shell for line in b.splitlines()]
        [self.model] = [line for line in lines if line.startswith("plancast scripted-model")]
        self.workers = [line for line in lines if line.startswith("plancast worker")]
        self.run = next(line for line in lines
                        if line.startswith('plancast run --nats "$NATS_URL" "'))


@pytest.mark.anyio
@BWRAP  # its coder runs a python step
async def test_the_multi_machine_recipe_runs_as_written(tmp_path: Path) -> None:
    doc = Recipe({old: free_port() for old in DOC_PORTS})
    workers, exports = doc.workers, doc.exports
    assert len(workers) == 3 and "--role supervisor" in workers[0]
    (tmp_path / "plancast.toml").write_text(doc.team)
    (tmp_path / "scenario.toml").write_text(doc.scenario)
    # No OpenAI key and no OPENAI_BASE_URL: the team file's base_url is the model.
    env = {**clean_env(),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    async with anyio.create_task_group() as tg, AsyncExitStack() as stack:
        async def start(script: str, name: str) -> Started:
            proc = await anyio.open_process(
                ["bash", "-c", script], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, start_new_session=True)
            started = Started(name, proc)
            stack.push_async_callback(_stop_group, proc)
            tg.start_soon(started.read)
            return started

        model = await start(f"exec {doc.model}", "scripted model")
        cluster_proc = await start(f"{doc.cluster}\nwait", "cluster")
        with anyio.fail_after(60):
            await model.said.wait()
        # "machines B and C" both run the researcher line; no wait for the cluster.
        procs = [await start(f"{exports}\nexec {line}", f"worker{n}") for n, line
                 in enumerate([workers[0], workers[1], workers[1], workers[2]])]
        logs = [model, cluster_proc, *procs]
        with anyio.fail_after(180):
            result = await anyio.run_process(
                ["bash", "-c", f"{exports}\nexec {doc.run}"], cwd=tmp_path, env=env,
                check=False)
        # A serving worker drains on SIGTERM and exits 0 (one still starting when the
        # run ends, as a spare researcher may be, would die of the signal instead).
        with anyio.fail_after(60):
            for started in procs:
                await started.serving.wait()
        for started in procs:
            started.proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(60):
            codes = [await started.proc.wait() for started in procs]
    assert result.returncode == 0, stderr_tail(result) + _logs(logs)
    assert codes == [0, 0, 0, 0], _logs(logs)
    said = result.stdout.decode()
    assert "answer: Germany has about 16 million more people than France." in said, said


class Started:
    """A started command and what it printed; ``serving`` is set once it says so."""

    def __init__(self, name: str, proc: Process) -> None:
        self.name, self.proc = name, proc
        self.out = bytearray()
        self.serving = anyio.Event()
        self.said = anyio.Event()
        """Set once the scripted model says where it listens."""

    async def read(self) -> None:
        assert self.proc.stdout is not None
        async for chunk in self.proc.stdout:
            self.out += chunk
            if b"serving" in self.out:
                self.serving.set()
            if b"OpenAI-compatible API at" in self.out:
                self.said.set()


def _logs(started: list[Started]) -> str:
    return "\n".join(f"--- {s.name}\n{s.out[-1500:].decode(errors='replace')}"
                     for s in started)


async def _stop_group(proc: Process) -> None:
    """SIGTERM to the command and everything it started; SIGKILL if it lingers."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        with anyio.move_on_after(30):
            await proc.wait()
            return
        os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
    except ProcessLookupError:
        pass
