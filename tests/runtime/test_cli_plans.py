"""``plancast plan save`` and ``plancast run --plan`` as a user runs them: real processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protocols import PlanStarted, RunFinished, StepFinished
from runtime.process import open_deployment
from runtime.settings import Settings
from runtime.testing import Rule, Scenario, open_scripted_model_server
from runtime.tools import builtin_tools

from ..actors.harness import echo, finish, make_team
from ..subprocesses import events_of, plancast, stderr_tail

pytestmark = pytest.mark.anyio


async def test_save_a_runs_plan_then_run_it_with_parameters(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """Run, save, put a parameter in the file by hand, run it twice with two values: the
    planner's model is asked once in all; mistakes are one line and exit 2."""
    where = ["--nats", nats_url, "--prefix", prefix]
    rules = [Rule(role="planner", lines=[echo(1, "auth"), echo(2, "deploy $1")]),
             finish("deployed")]
    plan_file = tmp_path / "deploy.json"
    async with open_scripted_model_server(Scenario(rules=rules)) as model:
        settings = Settings(nats_url=nats_url, prefix=prefix)
        async with open_deployment(settings, make_team(model.base_url),
                                   builtin_tools(plugins=False)):
            first = await plancast("run", "--json", *where, "deploy auth", cwd=tmp_path)
            run_id = events_of(first)[0].run_id
            saved = await plancast("plan", "save", run_id, "-o", str(plan_file), *where,
                                   cwd=tmp_path)
            assert saved.returncode == 0, stderr_tail(saved)
            text = plan_file.read_text()
            plan_file.write_text(text.replace('"auth"', '"{{service}}"'))
            reruns = [await plancast("run", "--json", "--plan", str(plan_file), "--param",
                                     f"service={name}", *where, cwd=tmp_path)
                      for name in ("billing", "search")]
            missing = await plancast("run", "--plan", str(plan_file), *where, cwd=tmp_path)
            unknown = await plancast("plan", "save", "run-000000000000", *where, cwd=tmp_path)
            planner_calls = sum(r.headers.get("x-plancast-role") == "planner"
                                for r in model.requests)

    assert first.returncode == 0, stderr_tail(first)
    assert "saved 2 steps" in saved.stdout.decode()
    assert json.loads(text)["goal"] == "deploy auth"
    for rerun, name in zip(reruns, ("billing", "search"), strict=True):
        assert rerun.returncode == 0, stderr_tail(rerun)
        events = events_of(rerun)
        assert isinstance(events[-1], RunFinished)
        outputs = {e.step_id: e.output for e in events if isinstance(e, StepFinished)}
        assert outputs == {1: name, 2: f"deploy {name}"}
        assert [e.model for e in events if isinstance(e, PlanStarted)] == ["given plan"]
    assert planner_calls == 1
    said = missing.stderr.decode().strip().splitlines()
    assert missing.returncode == 2 and said == ["error: the plan needs --param service=VALUE"], said
    said = unknown.stderr.decode().strip().splitlines()
    assert unknown.returncode == 2 and len(said) == 1 and "plancast runs" in said[0], said


async def test_a_saved_plan_the_local_team_cannot_run_is_one_line(tmp_path: Path) -> None:
    """Without --nats the plan is checked against the team file before anything starts."""
    (tmp_path / "plancast.toml").write_text(
        '[roles.planner]\nkind = "planner"\nmodel = { model = "m", base_url = '
        '"http://127.0.0.1:9/v1" }\n[roles.w]\ntools = ["echo"]\ntool_steps_only = true\n')
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"goal": "g", "steps": [
        {"id": 1, "role": "w", "tool": "math", "args": {"expression": "1+1"}}]}))
    result = await plancast("run", "--plan", str(plan), cwd=tmp_path)
    said = result.stderr.decode().strip().splitlines()
    assert result.returncode == 2 and len(said) == 1, stderr_tail(result)
    assert "the plan cannot run on this team" in said[0] and "'math'" in said[0], said
