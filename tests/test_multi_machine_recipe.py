"""``examples/multi_machine.md`` as written: its shell blocks start a three-node cluster on
loopback, its team file and worker commands serve the team (on the scripted model, through
``OPENAI_BASE_URL``), and its ``plancast run`` finishes. Only the ports change (free ones)."""

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
from runtime.testing import Rule, Scenario, open_scripted_model_server

from .actors.harness import finish, plan_line
from .needs import BWRAP
from .subprocesses import ROOT, clean_env, stderr_tail

RECIPE = ROOT / "examples" / "multi_machine.md"
DOC_PORTS = (4222, 4223, 4224, 6222, 6223, 6224)
RULES = [
    Rule(role="planner", lines=[
        plan_line(1, role="researcher", instruction="Find both populations."),
        plan_line(2, role="coder", tool="python",
                  args={"code": "print(84 - 68, 'million more in Germany')"})]),
    Rule(role="researcher", text="France: 68 million; Germany: 84 million."),
    finish("Germany has about 16 million more people than France."),
]


def recipe(ports: dict[int, int]) -> tuple[str, str, str, list[str], str]:
    """The cluster block, the team file, the exports, the worker lines and the run line."""
    text = RECIPE.read_text()
    for old, new in ports.items():
        text = text.replace(str(old), str(new))
    blocks = re.findall(r"```(\w+)\n(.*?)```", text, re.S)
    shell = [body for lang, body in blocks if lang == "sh"]
    [team] = [body for lang, body in blocks if lang == "toml"]
    [cluster] = [b for b in shell if "nats-server" in b]
    [exports] = [b for b in shell if "export NATS_URL" in b]
    lines = [line.split("#")[0].strip() for b in shell for line in b.splitlines()]
    workers = [line for line in lines if line.startswith("plancast worker")]
    run = next(line for line in lines if line.startswith('plancast run --nats "$NATS_URL" "'))
    return cluster, team, exports, workers, run


@pytest.mark.anyio
@BWRAP  # its coder runs a python step
async def test_the_multi_machine_recipe_runs_as_written(tmp_path: Path) -> None:
    ports = {old: free_port() for old in DOC_PORTS}
    cluster, team, exports, workers, run = recipe(ports)
    assert len(workers) == 3 and "--role supervisor" in workers[0]
    (tmp_path / "plancast.toml").write_text(team)
    async with open_scripted_model_server(Scenario(rules=RULES)) as model:
        env = {**clean_env(OPENAI_API_KEY="sk-test", OPENAI_BASE_URL=model.base_url),
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

            cluster_proc = await start(f"{cluster}\nwait", "cluster")
            # "machines B and C" both run the researcher line; no wait for the cluster.
            procs = [await start(f"{exports}\nexec {line}", f"worker{n}") for n, line
                     in enumerate([workers[0], workers[1], workers[1], workers[2]])]
            logs = [cluster_proc, *procs]
            with anyio.fail_after(180):
                result = await anyio.run_process(
                    ["bash", "-c", f"{exports}\nexec {run}"], cwd=tmp_path, env=env,
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

    async def read(self) -> None:
        assert self.proc.stdout is not None
        async for chunk in self.proc.stdout:
            self.out += chunk
            if b"serving" in self.out:
                self.serving.set()


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
