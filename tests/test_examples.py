"""Every example runs, offline, and does what its docstring says."""

from __future__ import annotations

import json
import os
import re
import shutil
import tomllib
from collections import Counter
from pathlib import Path

import anyio
import pytest

from protocols import (
    CriticVerdict,
    RunFinished,
    RunRequest,
    RunStarted,
    StepDispatched,
    StepFinished,
)
from runtime import Settings, follow, open_deployment, submit
from runtime.actor import discover_roles
from runtime.bus import free_port
from runtime.testing import Rule, Scenario, open_scripted_model_server
from runtime.tools import builtin_tools

from .actors.harness import RUN_TIMEOUT, echo, finish, make_team, plan_line
from .needs import BWRAP
from .subprocesses import (
    PYTHON,
    ROOT,
    background,
    clean_env,
    events_of,
    plancast,
    run,
    shell_env,
    stderr_tail,
)

EXAMPLES = ROOT / "examples"
PLUGIN = EXAMPLES / "plugin_role"
MCP_EXAMPLE = EXAMPLES / "mcp"

pytestmark = pytest.mark.anyio


async def test_quickstart_prints_the_answer_on_its_own(tmp_path: Path) -> None:
    """No NATS_URL: the quickstart starts its own embedded server and answers."""
    result = await run(PYTHON, str(EXAMPLES / "quickstart.py"), cwd=tmp_path)
    assert result.returncode == 0, stderr_tail(result)
    assert result.stdout.decode().strip() == "answer (from a scripted model): 6 times 7 is 42."


@BWRAP
async def test_fanout_reviews_the_program_and_joins_twelve_steps(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """The critic runs the coder's program: the first version is rejected because it does
    not run, the second is approved and then run by a tool step; twelve math steps fan
    out and are joined; both results agree."""
    env = clean_env(NATS_URL=nats_url, PLANCAST_PREFIX=prefix)
    result = await run(PYTHON, str(EXAMPLES / "fanout" / "run.py"), "--json",
                       "--time-scale", "0.3", cwd=tmp_path, env=env)
    assert result.returncode == 0, stderr_tail(result)
    events = events_of(result)
    assert isinstance(events[-1], RunFinished) and "650" in events[-1].answer
    done = {e.step_id: e.output.strip() for e in events if isinstance(e, StepFinished)}
    assert set(done) == set(range(1, 17))
    assert [done[k + 1] for k in range(1, 13)] == [str(k * k) for k in range(1, 13)]
    assert done[14] == done[15] == done[16] == "650"
    verdicts = [(v.attempt, v.approved) for v in events if isinstance(v, CriticVerdict)]
    assert verdicts == [(1, False), (2, True)]
    first = next(v for v in events if isinstance(v, CriticVerdict))
    assert "does not run" in first.critique and "NameError" in first.critique
    dispatched = Counter(e.step_id for e in events if isinstance(e, StepDispatched))
    assert dispatched[1] == 2 and all(dispatched[k] == 1 for k in range(2, 17))


# -- the plugin role -----------------------------------------------------------------------


def fake_install(site: Path) -> Path:
    """What ``pip install examples/plugin_role`` leaves for importlib.metadata: a dist-info
    with the entry points its pyproject.toml declares (the code stays in the example)."""
    project = tomllib.loads((PLUGIN / "pyproject.toml").read_text())["project"]
    name, version = project["name"], project["version"]
    dist = site / f"{name.replace('-', '_')}-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    roles = project["entry-points"]["plancast.roles"]
    (dist / "entry_points.txt").write_text(
        "[plancast.roles]\n" + "".join(f"{k} = {v}\n" for k, v in roles.items()))
    return site


async def test_a_saved_plan_runs_with_two_parameter_sets(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    env = clean_env(NATS_URL=nats_url, PLANCAST_PREFIX=prefix)
    script = str(EXAMPLES / "saved_plan" / "run.py")
    auth = await run(PYTHON, script, "service=auth", "replicas=3", "rps_per_replica=250",
                     cwd=tmp_path, env=env)
    search = await run(PYTHON, script, "service=search", "replicas=2", "rps_per_replica=40",
                       cwd=tmp_path, env=env)
    missing = await run(PYTHON, script, "service=auth", cwd=tmp_path, env=env)
    assert auth.returncode == 0, stderr_tail(auth)
    assert auth.stdout.decode().splitlines() == [
        "step 1: 750", "step 2: auth serves 750 requests per second"]
    assert search.returncode == 0, stderr_tail(search)
    assert search.stdout.decode().splitlines()[-1] == "step 2: search serves 80 requests per second"
    assert missing.returncode == 2 and missing.stderr.decode().strip() == (
        "error: the plan needs --param replicas=VALUE, --param rps_per_replica=VALUE")


async def test_plan_review_edits_then_rejects_and_rewrites(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    env = clean_env(NATS_URL=nats_url, PLANCAST_PREFIX=prefix)
    script = str(EXAMPLES / "plan_review" / "run.py")
    edited = await run(PYTHON, script, cwd=tmp_path, env=env)
    rejected = await run(PYTHON, script, "--reject", cwd=tmp_path, env=env)
    assert edited.returncode == 0, stderr_tail(edited)
    assert edited.stdout.decode().splitlines()[-3:] == [
        "approved by reviewer (step 2: args)", "step 1: build",
        "step 2: deploy build to staging"]
    assert rejected.returncode == 0, stderr_tail(rejected)
    lines = rejected.stdout.decode().splitlines()
    assert "rejected: never production" in lines and lines[-1] == "step 2: deploy build to canary"


async def test_hierarchy_delegates_to_two_sub_teams_and_one_replans_alone(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """The manager's two steps are child runs, shown indented under them; the research
    desk's failed step is replanned inside the child; the manager never replans."""
    env = clean_env(NATS_URL=nats_url, PLANCAST_PREFIX=prefix)
    result = await run(PYTHON, str(EXAMPLES / "hierarchy" / "run.py"), cwd=tmp_path, env=env)
    assert result.returncode == 0, stderr_tail(result)
    lines = result.stdout.decode().splitlines()
    top = [ln for ln in lines if not ln.startswith(" ")]
    assert top[-2:] == ["finished: A leap year has 366 days of 24 hours (8784 hours). "
                        "[7 model calls]", "(every model answer came from a scripted model)"]
    assert "step 1 done: 24 hours a day; 366 days in a leap year" in top
    assert not any(ln.startswith("replan") for ln in top)
    assert "    replan 1 (planner)" in lines
    assert "    finished: A leap year has 366 days of 24 hours. [2 model calls]" in lines
    # `plancast watch --json` on the root replays the whole tree, children included.
    child = lines[0].rsplit(" ", 1)[1]  # "step 1 -> sub-team run <child>"
    root = child.removesuffix("-s1a1")
    watched = await plancast("watch", root, "--json", cwd=tmp_path, env=env)
    assert watched.returncode == 0, stderr_tail(watched)
    events = events_of(watched)
    runs = {e.run_id for e in events}
    assert runs == {root, child, f"{root}-s2a1"}
    started = [e for e in events if isinstance(e, RunStarted) and e.run_id == child]
    assert started[0].parent is not None and started[0].parent.run_id == root


async def test_plugin_role_is_discovered_and_serves_steps(
    nats_url: str, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example package's entry point makes ``shouter`` a role kind: a team uses it by
    name, the planner assigns it a step, and it answers with its input in capitals."""
    monkeypatch.syspath_prepend(str(fake_install(tmp_path / "site")))
    monkeypatch.syspath_prepend(str(PLUGIN / "src"))
    entry = discover_roles()["shouter"]
    assert entry.ok, entry.error
    assert (entry.package, entry.target) == ("plancast-shouter", "plancast_shouter:Shouter")

    rules = [
        Rule(role="planner", lines=[
            echo(1, "hello"), echo(2, "plugins"),
            plan_line(3, role="loud", instruction="shout", depends_on=[1, 2]),
        ]),
        finish("shouted"),
    ]
    loud = {"loud": {"kind": "shouter", "description": "repeats its inputs in capitals",
                     "tool_steps_only": True}}
    async with open_scripted_model_server(Scenario(rules=rules)) as model:
        team = make_team(model.base_url, loud)
        settings = Settings(nats_url=nats_url, prefix=prefix)
        async with open_deployment(settings, team, builtin_tools(plugins=False)) as bus:
            accepted = await submit(bus, RunRequest(goal="shout a greeting"))
            with anyio.fail_after(RUN_TIMEOUT):
                events = [e async for e in follow(bus, accepted.run_id)]
    assert isinstance(events[-1], RunFinished), events[-1]
    shouted = next(e for e in events if isinstance(e, StepFinished) and e.step_id == 3)
    assert shouted.output == "HELLO\nPLUGINS"
    assert shouted.executor.startswith("loud/")


async def test_plancast_roles_lists_the_plugin_without_installing_it(tmp_path: Path) -> None:
    site = fake_install(tmp_path / "site")
    env = clean_env(PYTHONPATH=f"{site}:{PLUGIN / 'src'}")
    result = await plancast("roles", "--json", cwd=tmp_path, env=env)
    assert result.returncode == 0, stderr_tail(result)
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["shouter"]["ok"] and rows["shouter"]["package"] == "plancast-shouter"


async def test_plugin_role_runs_offline_as_its_readme_says(tmp_path: Path) -> None:
    """The plugin's README commands, from a clone's root, twice: its team and scenario run
    with no key (only the port changes; ``pip install`` is the stand-in the tests above
    use, put on PYTHONPATH)."""
    text = (PLUGIN / "README.md").read_text()
    [block] = [b for b in re.findall(r"```sh\n(.*?)```", text, re.S) if "scripted-model" in b]
    lines = [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]
    assert lines[0] == "pip install -e examples/plugin_role", lines
    [serve] = [line for line in lines if line.startswith("plancast scripted-model")]
    [run_line] = [line for line in lines if line.startswith("plancast run")]
    port = free_port()
    shutil.copytree(PLUGIN, tmp_path / "examples" / "plugin_role")
    team = tmp_path / "examples" / "plugin_role" / "team.toml"
    team.write_text(team.read_text().replace(":8000/", f":{port}/"))
    site = fake_install(tmp_path / "site")
    env = shell_env(PLANCAST_DATA_DIR=str(tmp_path / "data"), PYTHONPATH=os.pathsep.join(
        [str(site), str(PLUGIN / "src"), os.environ.get("PYTHONPATH", "")]))
    async with background(f"{serve} --port {port}", cwd=tmp_path, env=env) as model:
        await model.says("base_url")
        outputs = []
        for _ in range(2):
            with anyio.fail_after(RUN_TIMEOUT):
                done = await anyio.run_process(["bash", "-c", run_line], cwd=tmp_path,
                                               env=env, check=False)
            assert done.returncode == 0, stderr_tail(done) + done.stdout.decode()[-2000:]
            outputs.append(done.stdout.decode())
        assert await model.stop() == 0
    for out in outputs:
        [shouted] = [line for line in out.splitlines() if "│ 3 │ loud" in line]
        assert "HELLO" in shouted, out
        assert "answer: The loud role shouted: HELLO PLUGINS." in out, out


async def test_mcp_example_runs_offline_as_its_readme_says(tmp_path: Path) -> None:
    """examples/mcp's README commands, from a clone's root: plancast starts the notes
    server, the researcher's model calls its search tool and a tool step its read tool
    (only the port changes)."""
    text = (MCP_EXAMPLE / "README.md").read_text()
    [block] = [b for b in re.findall(r"```sh\n(.*?)```", text, re.S) if "scripted-model" in b]
    lines = [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]
    assert lines[0] == "pip install -e '.[mcp]'", lines
    [serve] = [line for line in lines if line.startswith("plancast scripted-model")]
    [run_line] = [line for line in lines if line.startswith("plancast run")]
    port = free_port()
    shutil.copytree(MCP_EXAMPLE, tmp_path / "examples" / "mcp")
    team = tmp_path / "examples" / "mcp" / "team.toml"
    team.write_text(team.read_text().replace(":8000/", f":{port}/"))
    env = shell_env(PLANCAST_DATA_DIR=str(tmp_path / "data"))
    async with background(f"{serve} --port {port}", cwd=tmp_path, env=env) as model:
        await model.says("base_url")
        with anyio.fail_after(RUN_TIMEOUT):
            done = await anyio.run_process(["bash", "-c", run_line], cwd=tmp_path, env=env,
                                           check=False)
        assert await model.stop() == 0
    out = done.stdout.decode()
    assert done.returncode == 0, stderr_tail(done) + out[-2000:]
    [found] = [line for line in out.splitlines() if "│ 1 │ researcher" in line]
    assert "jetstream.md" in found, out
    [read] = [line for line in out.splitlines() if "│ 2 │ researcher" in line]
    assert "# JetStream" in read, out
    assert "answer: plancast keeps every run in NATS JetStream streams" in out, out


# -- watching a run, and a team on several machines ------------------------------------------

PLAN = [echo(1, "one"), echo(2, "two"), echo(3, "$1 and $2")]


async def test_subscriber_prints_a_runs_events(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """The subscriber, started after the run ended, replays every event from the first."""
    async with open_scripted_model_server(Scenario(
            rules=[Rule(role="planner", lines=PLAN), finish("one and two")])) as model:
        settings = Settings(nats_url=nats_url, prefix=prefix)
        team = make_team(model.base_url)
        async with open_deployment(settings, team, builtin_tools(plugins=False)) as bus:
            accepted = await submit(bus, RunRequest(goal="count"))
            with anyio.fail_after(RUN_TIMEOUT):
                events = [e async for e in follow(bus, accepted.run_id)]

    script = str(EXAMPLES / "subscriber.py")
    args = [accepted.run_id, "--nats", nats_url, "--prefix", prefix]
    as_json = await run(PYTHON, script, *args, "--json", cwd=tmp_path)
    as_text = await run(PYTHON, script, *args, cwd=tmp_path)
    assert as_json.returncode == 0, stderr_tail(as_json)
    assert events_of(as_json) == events
    assert as_text.returncode == 0, stderr_tail(as_text)
    assert as_json.stderr == as_text.stderr == b"", "a subscriber exits quietly"
    lines = as_text.stdout.decode().splitlines()
    assert len(lines) == len(events)
    assert lines[-1].split() == [str(len(events)), "finished:", "one", "and", "two"]
    unknown = await run(PYTHON, script, "run-000000000000", "--nats", nats_url, "--prefix",
                        prefix, "--idle-timeout", "1", cwd=tmp_path)
    said = unknown.stderr.decode().strip().splitlines()
    assert unknown.returncode == 2 and len(said) == 1 and "no event for 1s" in said[0], said
