"""Offline as a way to work, with real processes: ``plancast scripted-model`` serving a
scenario, ``plancast run`` against it as a child process, the README's first screen run as
written, a scenario that answers every run, and a request no rule answers ending the run in
one line that names the scenario."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import anyio
import pytest

from runtime.bus import free_port

from .subprocesses import ROOT, background, shell_env, stderr_tail

pytestmark = pytest.mark.anyio

DOC_PORT = "8000"
"""The port the README and the example team files use; each test puts a free one in its place."""


def first_screen() -> list[str]:
    """The commands of the README's offline block, comments dropped."""
    text = (ROOT / "README.md").read_text()
    [block] = [b for b in re.findall(r"```sh\n(.*?)```", text, re.S)
               if "plancast scripted-model" in b]
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def clone(root: Path, port: int, *examples: str) -> None:
    """The files of a fresh clone the commands use: the examples, with ``port``."""
    for name in examples:
        shutil.copytree(ROOT / "examples" / name, root / "examples" / name)
        for team in (root / "examples" / name).glob("*.toml"):
            team.write_text(team.read_text().replace(f":{DOC_PORT}/", f":{port}/"))


async def run_line(line: str, cwd: Path, env: dict[str, str]) -> tuple[int, str, str, float]:
    """One shell line to its end: exit code, stdout, stderr, seconds."""
    started = time.monotonic()
    with anyio.fail_after(180):
        done = await anyio.run_process(["bash", "-c", line], cwd=cwd, env=env, check=False)
    return (done.returncode, done.stdout.decode(), stderr_tail(done),
            time.monotonic() - started)


async def test_the_readme_first_screen_runs_as_written(tmp_path: Path) -> None:
    """Clone to your own team answering offline, twice against one scripted model: the
    README's commands in a fresh directory (only the port changes; ``pip install`` is this
    environment's). Prints each command's time (``pytest -s``)."""
    port = free_port()
    clone(tmp_path, port, "offline")
    env = shell_env(PLANCAST_DATA_DIR=str(tmp_path / "data"))
    lines = [line.replace(f"--port {DOC_PORT}", f"--port {port}") for line in first_screen()]
    [serve] = [line for line in lines if line.startswith("plancast scripted-model")]
    [run] = [line for line in lines if line.startswith("plancast run")]
    assert lines[0] == "pip install -e '.[dev]'", lines  # done: this is that environment
    before = lines[1:lines.index(serve)]
    assert before == ["plancast demo", "cp -r examples/offline myteam"], before
    timings = []
    for line in before:
        code, out, err, seconds = await run_line(line, tmp_path, env)
        assert code == 0, f"{line}: {out[-2000:]}{err}"
        timings.append((line, seconds))
    async with background(f"{serve} --port {port}", cwd=tmp_path, env=env) as model:
        started = time.monotonic()
        banner = await model.says("base_url")
        timings.append((serve + " (until it says where)", time.monotonic() - started))
        assert f'base_url = "http://127.0.0.1:{port}/v1"' in banner, banner
        answers = []
        for _ in range(2):  # a scenario answers every run
            code, out, err, seconds = await run_line(run, tmp_path, env)
            assert code == 0, f"{run}: {out[-2000:]}{err}\n{model.output.decode()[-2000:]}"
            answers.append([ln for ln in out.splitlines() if ln.startswith("answer:")])
            timings.append((run, seconds))
        assert await model.stop() == 0, model.output.decode()[-2000:]
    assert answers == [["answer: Twice the population of France is 136.8 million."]] * 2
    for line, seconds in timings:
        print(f"{seconds:6.1f} s  {line}")


DEMO_TEAM = ROOT / "runtime" / "cli" / "demo" / "team.toml"


async def test_the_demo_scenario_answers_two_runs_in_a_row(tmp_path: Path) -> None:
    """The demo's scenario (its critic calls a tool, then gives its verdict) served by
    ``plancast scripted-model``, and two ``plancast run`` of the demo's team against it:
    both finish (its critic's first rule was once used up by the first run)."""
    scenario = ROOT / "runtime" / "cli" / "demo" / "scenario.toml"
    async with background(f"plancast scripted-model {scenario} --port 0 --time-scale 0.1",
                          cwd=tmp_path, env=shell_env()) as model:
        url = (await model.says("OpenAI-compatible API at")).split()[-1]
        team = tmp_path / "team.toml"
        team.write_text(DEMO_TEAM.read_text().replace(
            'model = "scripted-model"', f'model = "scripted-model"\nbase_url = "{url}"', 1))
        goal = "Compare the populations of France and Germany"
        env = shell_env(PLANCAST_DATA_DIR=str(tmp_path / "data"))
        for attempt in (1, 2):
            code, out, err, _ = await run_line(
                f'plancast run --team team.toml "{goal}"', tmp_path, env)
            assert code == 0, f"run {attempt}: {out[-2000:]}{err}"
            assert "answer: Germany (84.5 M) has about 1.235 times" in out, out
        assert await model.stop() == 0


SCENARIO_WITHOUT = {
    "researcher": '''
[[rules]]
role = "planner"
lines = ['{"id": 1, "role": "researcher", "title": "France", "instruction": "France?"}']

[[rules]]
role = "synthesizer"
text = '{"action": "finish", "answer": "never"}'
''',
    "synthesizer": '''
[[rules]]
role = "planner"
lines = ['{"id": 1, "role": "analyst", "title": "2", "tool": "math", "args": {"expression": "2"}}']
''',
    "planner": '''
[[rules]]
role = "synthesizer"
text = '{"action": "finish", "answer": "never"}'
''',
}


@pytest.mark.parametrize("missing", sorted(SCENARIO_WITHOUT))
async def test_a_request_no_rule_answers_ends_the_run_in_one_line_naming_the_scenario(
        tmp_path: Path, missing: str) -> None:
    """A scenario with no rule for a role's request: the run fails at once with one line
    that names the scenario, the role and the request, not as an invalid plan after
    replanning."""
    (tmp_path / "gaps.toml").write_text(SCENARIO_WITHOUT[missing])
    port = free_port()
    clone(tmp_path, port, "offline")
    env = shell_env(PLANCAST_DATA_DIR=str(tmp_path / "data"))
    async with background(f"plancast scripted-model gaps.toml --port {port}",
                          cwd=tmp_path, env=env) as model:
        await model.says("base_url")
        code, out, err, _ = await run_line(
            'plancast run --team examples/offline/team.toml "Twice the population of France"',
            tmp_path, env)
        log = model.output.decode()
        assert await model.stop() == 0
    assert code == 1, f"{out[-2000:]}{err}"
    # The outcome, printed as one line (rich wraps it at the 80 columns of a pipe).
    said = " ".join(out[out.index("run failed"):].split())
    assert said.startswith("run failed ("), said
    assert "no rule matched this request in scenario gaps.toml" in said, said
    assert f"role={missing!r}" in said and "request #" in said, said
    assert "invalid" not in out + err, out + err
    assert "NO MATCH" in log and f"role={missing!r}" in log, log
