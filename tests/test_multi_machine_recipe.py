"""``examples/multi_machine.md`` as written: its shell blocks start a three-node cluster on
loopback, its team file and worker commands serve the team (on the scripted model, through
``OPENAI_BASE_URL``), and its ``plancast run`` finishes. Only the ports change (free ones)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import anyio
import pytest

from runtime.embedded import free_port
from runtime.testing import Rule, Scenario, open_scripted_model_server

from .actors.harness import finish, plan_line
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
async def test_the_multi_machine_recipe_runs_as_written(tmp_path: Path) -> None:
    ports = {old: free_port() for old in DOC_PORTS}
    cluster, team, exports, workers, run = recipe(ports)
    assert len(workers) == 3 and "--role supervisor" in workers[0]
    (tmp_path / "plancast.toml").write_text(team)
    async with open_scripted_model_server(Scenario(rules=RULES)) as model:
        env = {**clean_env(OPENAI_API_KEY="sk-test", OPENAI_BASE_URL=model.base_url),
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        with ExitStack() as stack:
            def start(script: str, log: str) -> subprocess.Popen[bytes]:
                out = stack.enter_context((tmp_path / log).open("wb"))
                proc = subprocess.Popen(["bash", "-c", script], cwd=tmp_path, env=env,
                                        stdout=out, stderr=out, start_new_session=True)
                stack.callback(_stop_group, proc)
                return proc

            start(f"{cluster}\nwait", "cluster.log")
            # "machines B and C" both run the researcher line; no wait for the cluster.
            procs = [start(f"{exports}\nexec {line}", f"worker{n}.log") for n, line
                     in enumerate([workers[0], workers[1], workers[1], workers[2]])]
            with anyio.fail_after(180):
                result = await anyio.run_process(
                    ["bash", "-c", f"{exports}\nexec {run}"], cwd=tmp_path, env=env,
                    check=False)
            for proc in procs:  # workers drain on SIGTERM and exit 0
                proc.send_signal(signal.SIGTERM)
            with anyio.fail_after(60):
                codes = [await anyio.to_thread.run_sync(proc.wait) for proc in procs]
    assert result.returncode == 0, stderr_tail(result) + _logs(tmp_path)
    assert codes == [0, 0, 0, 0], _logs(tmp_path)
    said = result.stdout.decode()
    assert "answer: Germany has about 16 million more people than France." in said, said


def _logs(directory: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in directory.glob("*.log"))


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the command and everything it started; SIGKILL if it lingers."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass
