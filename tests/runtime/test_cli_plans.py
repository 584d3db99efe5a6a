"""``plancast plan save`` and ``plancast run --plan`` as a user runs them: real processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protocols import (
    PlanApproved,
    PlanAwaitingApproval,
    PlanStarted,
    RunFinished,
    RunRequest,
    StepAwaitingApproval,
    StepFinished,
)
from runtime.bus import Bus
from runtime.client import follow, submit
from runtime.config import Settings
from runtime.testing import Rule, Scenario, open_scripted_model_server
from runtime.tools import builtin_tools
from runtime.worker import open_deployment

from ..actors.harness import echo, finish, make_team, plan_line
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


async def test_review_a_plan_from_the_shell(nats_url: str, prefix: str, tmp_path: Path) -> None:
    """``plan show --json``, edit the file, ``plan approve --edit``: the edit runs. A bad
    edit is refused by the run (exit 1, its reason); ``reject`` sends it back; a run with
    nothing awaiting says so in one line."""
    where = ["--nats", nats_url, "--prefix", prefix]
    rules = [Rule(role="planner", contains="too slow", lines=[echo(1, "fast")]),
             Rule(role="planner", lines=[echo(1, "hello"), echo(2, "$1, world")]),
             finish("ok")]
    async with open_scripted_model_server(Scenario(rules=rules)) as model:
        settings = Settings(nats_url=nats_url, prefix=prefix)
        async with open_deployment(settings, make_team(model.base_url),
                                   builtin_tools(plugins=False)) as bus:
            first = await submit(bus, RunRequest(goal="greet", review_plan="human"))
            await plan_awaiting_soon(bus, first.run_id)
            shown = await plancast("plan", "show", first.run_id, "--json", *where, cwd=tmp_path)
            table = await plancast("plan", "show", first.run_id, *where, cwd=tmp_path)
            plan = json.loads(shown.stdout)["plan"]
            plan["steps"][0]["args"]["text"] = "hi"
            (tmp_path / "bad.json").write_text(json.dumps([{**plan["steps"][0], "role": "x"}]))
            (tmp_path / "edit.json").write_text(json.dumps(plan))
            bad = await plancast("plan", "approve", first.run_id, "--edit", "bad.json", *where,
                                 cwd=tmp_path)
            good = await plancast("plan", "approve", first.run_id, "--edit", "edit.json",
                                  "--by", "ada", *where, cwd=tmp_path)
            events = [e async for e in follow(bus, first.run_id)]
            nothing = await plancast("plan", "show", first.run_id, *where, cwd=tmp_path)

            second = await submit(bus, RunRequest(goal="greet", review_plan="human"))
            await plan_awaiting_soon(bus, second.run_id)
            rejected = await plancast("plan", "reject", second.run_id, "--reason", "too slow",
                                      *where, cwd=tmp_path)

    assert shown.returncode == 0, stderr_tail(shown)
    assert plan["type"] == "event.plan.awaiting_approval" and len(plan["steps"]) == 2
    assert table.returncode == 0 and "awaits approval" in table.stdout.decode()
    said = bad.stderr.decode().strip().splitlines()
    assert bad.returncode == 1 and len(said) == 1, stderr_tail(bad)
    assert "the run refused the decision: the edited plan is invalid" in said[0]
    assert good.returncode == 0, stderr_tail(good)
    assert "plan of round 0 approved" in good.stdout.decode()
    outputs = {e.step_id: e.output for e in events if isinstance(e, StepFinished)}
    assert outputs == {1: "hi", 2: "hi, world"}
    approved = next(e for e in events if isinstance(e, PlanApproved))
    assert approved.by == "ada" and approved.changes == "step 1: args"
    said = nothing.stderr.decode().strip().splitlines()
    assert nothing.returncode == 2 and said == [
        f"error: nothing of run {first.run_id} awaits approval now (see `plancast watch "
        f"{first.run_id}`)"], said
    assert rejected.returncode == 0, stderr_tail(rejected)
    assert "rejected: the planner writes it again" in rejected.stdout.decode()


async def plan_awaiting_soon(bus: Bus, run_id: str) -> None:
    async for event in follow(bus, run_id):
        if isinstance(event, PlanAwaitingApproval):
            return


async def test_approve_a_step_at_its_gate_from_the_shell(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    where = ["--nats", nats_url, "--prefix", prefix]
    rules = [Rule(role="planner", lines=[plan_line(1, tool="math", args={"expression": "2+2"})]),
             finish("4")]
    async with open_scripted_model_server(Scenario(rules=rules)) as model:
        settings = Settings(nats_url=nats_url, prefix=prefix)
        async with open_deployment(settings, make_team(model.base_url, approve_tools=["math"]),
                                   builtin_tools(plugins=False)) as bus:
            run = await submit(bus, RunRequest(goal="add"))
            async for event in follow(bus, run.run_id):
                if isinstance(event, StepAwaitingApproval):
                    break
            shown = await plancast("plan", "show", run.run_id, *where, cwd=tmp_path)
            approved = await plancast("plan", "approve", run.run_id, "--step", "1", *where,
                                      cwd=tmp_path)
            again = await plancast("plan", "approve", run.run_id, "--step", "1", *where,
                                   cwd=tmp_path)
            events = [e async for e in follow(bus, run.run_id)]
    assert "step 1 (attempt 1, role worker) awaits approval: it calls math" in \
        shown.stdout.decode()
    assert approved.returncode == 0, stderr_tail(approved)
    assert approved.stdout.decode().strip() == f"run {run.run_id}: step 1 (attempt 1) approved: " \
        "it runs now"
    assert again.returncode == 2 and "does not await approval" in again.stderr.decode()
    assert isinstance(events[-1], RunFinished)


async def test_a_plan_kept_by_name_in_the_deployment_runs_again_from_its_name(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    where = ["--nats", nats_url, "--prefix", prefix]
    rules = [Rule(role="planner", lines=[echo(1, "hello"), echo(2, "$1, world")]),
             finish("hello, world")]
    async with open_scripted_model_server(Scenario(rules=rules)) as model:
        settings = Settings(nats_url=nats_url, prefix=prefix)
        async with open_deployment(settings, make_team(model.base_url),
                                   builtin_tools(plugins=False)):
            first = await plancast("run", "--json", *where, "greet", cwd=tmp_path)
            saved = await plancast("plan", "save", events_of(first)[0].run_id, "--name",
                                   "greeting", *where, cwd=tmp_path)
            listed = await plancast("plan", "list", "--json", *where, cwd=tmp_path)
            again = await plancast("run", "--json", "--plan", "greeting", *where, cwd=tmp_path)
            missing = await plancast("run", "--plan", "nosuch", *where, cwd=tmp_path)
            bad_name = await plancast("plan", "save", events_of(first)[0].run_id, "--name",
                                      "a b", *where, cwd=tmp_path)
            planner_calls = sum(r.headers.get("x-plancast-role") == "planner"
                                for r in model.requests)
    assert saved.returncode == 0, stderr_tail(saved)
    assert "to the deployment as 'greeting'" in saved.stdout.decode()
    found = json.loads(listed.stdout)
    assert list(found) == ["greeting"] and len(found["greeting"]["steps"]) == 2
    assert again.returncode == 0, stderr_tail(again)
    outputs = {e.step_id: e.output for e in events_of(again) if isinstance(e, StepFinished)}
    assert outputs == {1: "hello", 2: "hello, world"} and planner_calls == 1
    said = missing.stderr.decode().strip().splitlines()
    assert missing.returncode == 2 and len(said) == 1 and "plancast plan list" in said[0], said
    assert bad_name.returncode == 2 and "letters, digits" in bad_name.stderr.decode()


async def test_approve_with_an_edit_file_that_is_missing_is_one_line(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    result = await plancast("plan", "approve", "r1", "--edit", str(tmp_path / "missing.json"),
                            "--nats", nats_url, "--prefix", prefix, cwd=tmp_path)
    lines = result.stderr.decode().strip().splitlines()
    assert result.returncode == 2, stderr_tail(result)
    assert len(lines) == 1 and "--edit" in lines[0] and "no such file" in lines[0], lines
