"""Acting on runs through ``plancast serve``, as the dashboard and any HTTP client do:
decide on plans and gated steps, cancel, replan, submit saved plans, read a team's tree and
a step's whole output. Each decision is recorded as made by the user whose token sent it.
A real gateway process, a real team, the scripted model."""

from __future__ import annotations

import getpass
import secrets
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import msgspec
import pytest

from protocols import (
    PlanApproved,
    PlanAwaitingApproval,
    ReplanStarted,
    RunFailed,
    RunFinished,
    SavedPlan,
    Step,
    StepApproved,
    StepAwaitingApproval,
    StepFailed,
    StepFinished,
    StepPlanned,
    child_run_id,
)
from runtime.bus import Bus, free_port
from runtime.client import follow, store_plan
from runtime.config import Settings
from runtime.gateway import DECISION_WAIT, Access, gateway
from runtime.testing import Rule, Scenario, open_scripted_model_server
from runtime.tools import builtin_tools
from runtime.worker import open_deployment

from ..actors.harness import echo, finish, make_team
from ..actors.test_hierarchy import HIERARCHY, hierarchy_rules
from ..subprocesses import PLANCAST, clean_env, plancast, stderr_tail
from .test_cli import RULES
from .test_gateway import Gateway, _listening, serving_gateway

pytestmark = pytest.mark.anyio

ME = f"{getpass.getuser()} (gateway)"
"""How the events name a decision sent with the gateway's one token: the user serving it."""
WAIT = 60.0
"""A guard against a run that hangs (the test fails instead)."""


@asynccontextmanager
async def _team_and_gateway(nats_url: str, prefix: str, tmp_path: Path,
                            rules: list[Rule] | None = None, roles: dict[str, Any] | None = None,
                            args: tuple[str, ...] = (), env: dict[str, str] | None = None,
                            ) -> AsyncIterator[tuple[Bus, Gateway]]:
    """A team on the scripted model, and ``plancast serve`` (given ``args``) in front."""
    async with open_scripted_model_server(Scenario(rules=rules or RULES)) as model:
        settings = Settings(nats_url=nats_url, prefix=prefix)
        async with open_deployment(settings, make_team(model.base_url, roles),
                                   builtin_tools(plugins=False)) as bus, \
                serving_gateway(nats_url, prefix, tmp_path, *args, **(env or {})) as served:
            yield bus, served


async def _until(bus: Bus, run_id: str, kind: type[Any], nth: int = 1) -> Any:
    """The run's ``nth`` event of ``kind`` (the run must come to it)."""
    with anyio.fail_after(WAIT):
        async for event in follow(bus, run_id):
            if isinstance(event, kind):
                nth -= 1
                if nth == 0:
                    return event
    raise AssertionError(f"run {run_id} ended with no {kind.__name__}")


async def _all(bus: Bus, run_id: str) -> list[Any]:
    with anyio.fail_after(WAIT):
        return [e async for e in follow(bus, run_id)]


async def test_a_plan_decision_waits_for_the_runs_answer_and_names_its_user(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """An edit that does not decode is 422 at once; one the planner finds invalid is 422
    with the planner's reason, and the plan still waits; a `by` naming someone else is
    403; a valid edit is 200, recorded as the token's user, and the run finishes. A
    rejection is 200 "rejected", and the planner writes the plan again."""
    async with _team_and_gateway(nats_url, prefix, tmp_path) as (bus, served), \
            served.client() as client:
        run_id = (await client.post("/runs", json={"goal": "greet the world",
                                                   "review_plan": "human"})).json()["run_id"]
        shown: PlanAwaitingApproval = await _until(bus, run_id, PlanAwaitingApproval)
        plan = f"/runs/{run_id}/plan"
        steps = msgspec.to_builtins(shown.steps)
        garbled = await client.post(plan, json={"approved": True, "steps": [{"id": "one"}]})
        ghost = await client.post(plan, json={"approved": True, "steps": [
            {**steps[0], "role": "ghost"}, steps[1]]})
        impostor = await client.post(plan, json={"approved": True, "by": "ada"})
        still = await client.get(plan)
        edited = [steps[0], {**steps[1], "args": {"text": "$1, there"}}]
        approved = await client.post(plan, json={"approved": True, "steps": edited})
        again = await client.post(plan, json={"approved": True})
        events = await _all(bus, run_id)

        rejected_run = (await client.post("/runs", json={
            "goal": "greet the world", "review_plan": "human"})).json()["run_id"]
        await _until(bus, rejected_run, PlanAwaitingApproval)
        rejected = await client.post(f"/runs/{rejected_run}/plan",
                                     json={"approved": False, "reason": "too short"})
        await _until(bus, rejected_run, PlanAwaitingApproval, nth=2)
        unknown = await client.post("/runs/run-000000000000/plan", json={"approved": True})
    assert garbled.status_code == 422 and "not a decision" in garbled.json()["error"]
    assert ghost.status_code == 422, ghost.text
    assert ghost.json()["error"].startswith("the edited plan is invalid") \
        and "ghost" in ghost.json()["error"]
    assert impostor.status_code == 403 and "never in another's name" in impostor.json()["error"]
    assert still.status_code == 200 and still.json()["digest"] == shown.digest
    assert approved.status_code == 200, approved.text
    assert approved.json() == {
        "outcome": "approved", "by": ME, "round": 0, "digest": shown.digest, "edited": True,
        "changes": "step 2: args"}
    assert again.status_code == 409 and "awaits approval" in again.json()["error"]
    assert [(e.by, e.edited) for e in events if isinstance(e, PlanApproved)] == [(ME, True)]
    assert [e.step.args for e in events if isinstance(e, StepPlanned)][-1] == {
        "text": "$1, there"}
    assert isinstance(events[-1], RunFinished)
    assert rejected.status_code == 200, rejected.text
    assert rejected.json()["outcome"] == "rejected" and rejected.json()["by"] == ME
    assert unknown.status_code == 404


async def test_a_decision_the_run_never_answers_is_504_once_the_bound_has_passed(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """The team stops while its plan waits: the decision is stored, nobody takes it, and
    the request ends after DECISION_WAIT with a line that says so."""
    async with open_scripted_model_server(Scenario(rules=RULES)) as model, \
            AsyncExitStack() as team:
        settings = Settings(nats_url=nats_url, prefix=prefix)
        bus = await team.enter_async_context(open_deployment(
            settings, make_team(model.base_url), builtin_tools(plugins=False)))
        async with serving_gateway(nats_url, prefix, tmp_path) as served, \
                served.client() as client:
            run_id = (await client.post("/runs", json={
                "goal": "greet the world", "review_plan": "human"})).json()["run_id"]
            await _until(bus, run_id, PlanAwaitingApproval)
            await team.aclose()  # the planner is gone: nothing will answer
            with anyio.fail_after(DECISION_WAIT * 3):
                silent = await client.post(f"/runs/{run_id}/plan", json={"approved": True})
    assert silent.status_code == 504, silent.text
    assert "the decision is stored" in silent.json()["error"]
    assert f"{DECISION_WAIT:g}s" in silent.json()["error"]


async def test_a_gated_step_is_listed_and_decided_as_the_users(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """Each user of a users file signs in with their own token: /me names them, and the
    gate a user opens (or closes) names them in the run's events."""
    roles = {"deployer": {"description": "deploys", "tools": ["echo"],
                          "tool_steps_only": True, "approval": True}}
    rules = [Rule(role="planner", contains="not on a Friday", lines=[echo(2, "wait")]),
             Rule(role="planner", lines=[echo(1, "deploy", role="deployer")]),
             finish("done")]
    alice, bob = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    users = tmp_path / "users"
    users.write_text(f"# who may use the gateway\nalice {alice}\nbob {bob}\n")
    users.chmod(0o600)
    async with _team_and_gateway(nats_url, prefix, tmp_path, rules, roles,
                                 args=("--users", str(users)),
                                 env={"PLANCAST_GATEWAY_TOKEN": alice}) as (bus, served), \
            served.client() as as_alice, \
            httpx2.AsyncClient(base_url=served.url, timeout=30,
                               headers={"Authorization": f"Bearer {bob}"}) as as_bob:
        me = [(await c.get("/me")).json() for c in (as_alice, as_bob)]
        first = (await as_alice.post("/runs", json={"goal": "deploy"})).json()["run_id"]
        await _until(bus, first, StepAwaitingApproval)
        held = await as_alice.get(f"/runs/{first}/steps/awaiting")
        not_held = await as_bob.post(f"/runs/{first}/steps/2/decision", json={"approved": True})
        approved = await as_bob.post(f"/runs/{first}/steps/1/decision", json={"approved": True})
        first_events = await _all(bus, first)
        second = (await as_alice.post("/runs", json={"goal": "deploy"})).json()["run_id"]
        await _until(bus, second, StepAwaitingApproval)
        rejected = await as_alice.post(f"/runs/{second}/steps/1/decision", json={
            "approved": False, "reason": "not on a Friday"})
        second_events = await _all(bus, second)
        after = await as_alice.get(f"/runs/{second}/steps/awaiting")
    assert me == [{"user": "alice"}, {"user": "bob"}]
    assert held.status_code == 200
    assert [(s["step_id"], s["attempt"], s["type"]) for s in held.json()] == [
        (1, 1, "event.step.awaiting_approval")]
    assert not_held.status_code == 409
    assert approved.status_code == 200, approved.text
    assert approved.json() == {"outcome": "approved", "by": "bob (gateway)", "step_id": 1,
                               "attempt": 1}
    assert [e.by for e in first_events if isinstance(e, StepApproved)] == ["bob (gateway)"]
    assert isinstance(first_events[-1], RunFinished)
    assert rejected.status_code == 200 and rejected.json()["outcome"] == "rejected"
    failed = next(e for e in second_events if isinstance(e, StepFailed))
    assert failed.error == "rejected by alice (gateway): not on a Friday"
    assert after.json() == []


async def test_a_users_file_others_can_read_is_refused(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    users = tmp_path / "users"
    users.write_text(f"alice {secrets.token_urlsafe(24)}\n")
    users.chmod(0o644)
    loose = await plancast("serve", "--port", str(free_port()), "--nats", nats_url,
                           "--prefix", prefix, "--users", str(users), cwd=tmp_path,
                           env=clean_env(PLANCAST_DATA_DIR=str(tmp_path / "data")))
    users.chmod(0o600)
    users.write_text("alice\n")
    broken = await plancast("serve", "--port", str(free_port()), "--nats", nats_url,
                            "--prefix", prefix, cwd=tmp_path, env=clean_env(
                                PLANCAST_DATA_DIR=str(tmp_path / "data"),
                                PLANCAST_GATEWAY_USERS=str(users)))
    assert loose.returncode == 2 and "readable by others (mode 644)" in stderr_tail(loose)
    assert broken.returncode == 2 and "line 1: write `name token`" in stderr_tail(broken)


async def test_cancel_and_replan_are_recorded_as_the_users(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """A run held at a gate is sent back to its planner (event.replan names the user),
    then cancelled (its last event names the user); an ended run takes neither (409), and
    a run with no replans left is not asked to fail by replanning."""
    roles = {"deployer": {"description": "deploys", "tools": ["echo"],
                          "tool_steps_only": True, "approval": True}}
    rules = [Rule(role="planner", contains="use the stage",
                  lines=[echo(2, "deploy on stage", role="deployer")]),
             Rule(role="planner", lines=[echo(1, "deploy", role="deployer")]), finish("x")]
    async with _team_and_gateway(nats_url, prefix, tmp_path, rules, roles) as (bus, served), \
            served.client() as client:
        run_id = (await client.post("/runs", json={"goal": "deploy"})).json()["run_id"]
        await _until(bus, run_id, StepAwaitingApproval)
        empty = await client.post(f"/runs/{run_id}/replan", json={"reason": ""})
        replan = await client.post(f"/runs/{run_id}/replan", json={"reason": "use the stage"})
        replanned: ReplanStarted = await _until(bus, run_id, ReplanStarted)
        await _until(bus, run_id, StepAwaitingApproval, nth=2)
        no_more = await client.post(f"/runs/{run_id}/replan", json={"reason": "again"})
        cancelled = await client.post(f"/runs/{run_id}/cancel", json={"reason": "Friday"})
        events = await _all(bus, run_id)
        ended = [await client.post(f"/runs/{run_id}/cancel", json={}),
                 await client.post(f"/runs/{run_id}/replan", json={"reason": "x"})]
        unknown = await client.post("/runs/run-000000000000/cancel", json={})
        typo = await client.post(f"/runs/{run_id}/cancel", json={"why": "x"})
    assert empty.status_code == 422
    assert replan.status_code == 202 and replan.json() == {"run_id": run_id, "by": ME}
    assert (replanned.source, replanned.reason) == (ME, "use the stage")
    assert no_more.status_code == 409 and "no replans left" in no_more.json()["error"]
    assert cancelled.status_code == 202 and cancelled.json()["by"] == ME
    last = events[-1]
    assert isinstance(last, RunFailed) and last.cause == "cancelled"
    assert f"cancelled by {ME}: Friday" in last.reason
    assert [r.status_code for r in ended] == [409, 409]
    assert "has failed already" in ended[0].json()["error"]
    assert unknown.status_code == 404 and typo.status_code == 422


async def test_a_saved_plan_is_submitted_with_its_params(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """GET /plans lists what a submit form offers; a saved plan runs filled with params;
    a param missing or unknown, or a plan unknown, is one line and 422."""
    saved = SavedPlan(goal="greet {{who}}", steps=[
        Step(id=1, role="worker", tool="echo", args={"text": "hello"}),
        Step(id=2, role="worker", tool="echo", args={"text": "$1, {{who}}"},
             depends_on=[1])])
    async with _team_and_gateway(nats_url, prefix, tmp_path) as (bus, served), \
            served.client() as client:
        await store_plan(bus, "greeting", saved)
        listed = await client.get("/plans")
        missing = await client.post("/runs", json={"saved_plan": "greeting"})
        extra = await client.post("/runs", json={"saved_plan": "greeting",
                                                 "params": {"who": "x", "whom": "y"}})
        unknown = await client.post("/runs", json={"saved_plan": "nothing"})
        orphan = await client.post("/runs", json={"goal": "greet", "params": {"who": "x"}})
        accepted = await client.post("/runs", json={"saved_plan": "greeting",
                                                    "params": {"who": "world"}})
        run_id = accepted.json()["run_id"]
        events = await _all(bus, run_id)
        run = (await client.get(f"/runs/{run_id}")).json()
    assert listed.json() == [{"name": "greeting", "goal": "greet {{who}}", "params": ["who"],
                              "steps": 2}]
    for refused, needle in ((missing, "needs a value for who"),
                            (extra, "has no parameter whom; its parameters: who"),
                            (unknown, "no plan named 'nothing'"),
                            (orphan, "params fill a saved plan")):
        assert refused.status_code == 422, refused.text
        assert needle in refused.json()["error"] and "\n" not in refused.json()["error"]
    assert accepted.status_code == 202, accepted.text
    assert run["goal"] == "greet world"
    assert [e.step.args["text"] for e in events if isinstance(e, StepPlanned)] == [
        "hello", "$1, world"]
    assert [e.output for e in events if isinstance(e, StepFinished)] == [
        "hello", "hello, world"]


async def test_a_sub_teams_runs_name_their_parent_and_the_parent_its_children(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    async with _team_and_gateway(nats_url, prefix, tmp_path, hierarchy_rules(),
                                 HIERARCHY) as (bus, served), served.client() as client:
        root = (await client.post("/runs", json={"goal": "a report on agents"})
                ).json()["run_id"]
        await _all(bus, root)
        research, writing = child_run_id(root, 1, 1), child_run_id(root, 2, 1)
        await _all(bus, writing)
        parent = (await client.get(f"/runs/{root}")).json()
        child = (await client.get(f"/runs/{research}")).json()
        listed = {r["run_id"]: r["parent"] for r in (await client.get("/runs")).json()}
    assert parent["parent"] is None
    assert parent["children"] == [
        {"run_id": research, "step_id": 1, "attempt": 1, "status": "finished"},
        {"run_id": writing, "step_id": 2, "attempt": 1, "status": "finished"}]
    assert child["children"] == []
    assert (child["parent"]["run_id"], child["parent"]["step_id"]) == (root, 1)
    assert listed[root] is None
    assert listed[writing]["run_id"] == root and listed[writing]["step_id"] == 2


async def test_a_steps_whole_output_is_served_as_text(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """A long output (kept in the object store, its event shortened) comes back whole, as
    plain text that no browser reads as markup; a short one too."""
    long = "<b>" + "x" * 9000 + "</b>"
    rules = [Rule(role="planner", lines=[echo(1, long), echo(2, "short")]), finish("ok")]
    async with _team_and_gateway(nats_url, prefix, tmp_path, rules) as (bus, served), \
            served.client() as client:
        run_id = (await client.post("/runs", json={"goal": "echo"})).json()["run_id"]
        events = await _all(bus, run_id)
        whole = await client.get(f"/runs/{run_id}/steps/1/output")
        short = await client.get(f"/runs/{run_id}/steps/2/output")
        none = await client.get(f"/runs/{run_id}/steps/9/output")
        unknown = await client.get("/runs/run-000000000000/steps/1/output")
    shown = next(e for e in events if isinstance(e, StepFinished) and e.step_id == 1)
    assert len(shown.output) < len(long)
    assert whole.status_code == 200 and whole.text == long
    assert whole.headers["content-type"] == "text/plain; charset=utf-8"
    assert whole.headers["x-content-type-options"] == "nosniff"
    assert short.text == "short"
    assert none.status_code == 404 and unknown.status_code == 404


async def test_every_route_refuses_what_the_gateway_refuses(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """The new routes are behind the same door: no token 401, another site's Origin 403,
    a form body 415; and the OpenAPI document names every route the gateway serves."""
    async with _team_and_gateway(nats_url, prefix, tmp_path) as (bus, served), \
            served.client() as client, \
            httpx2.AsyncClient(base_url=served.url, timeout=30) as stranger:
        run_id = (await client.post("/runs", json={"goal": "greet the world"})
                  ).json()["run_id"]
        await _all(bus, run_id)
        reads = ["/me", "/plans", f"/runs/{run_id}/steps/awaiting",
                 f"/runs/{run_id}/steps/1/output"]
        changes = [f"/runs/{run_id}/plan", f"/runs/{run_id}/steps/1/decision",
                   f"/runs/{run_id}/cancel", f"/runs/{run_id}/replan"]
        no_token = [(await stranger.get(p)).status_code for p in reads] + [
            (await stranger.post(p, json={"approved": True})).status_code for p in changes]
        cross_site = [(await client.post(p, json={"approved": True}, headers={
            "Origin": "http://cats.example"})).status_code for p in changes]
        form = [(await client.post(p, data={"approved": "true"})).status_code
                for p in changes]
        spec = (await client.get("/openapi.json")).json()
    served_paths = {route.path for route in gateway(  # type: ignore[attr-defined]
        None, Access.of({"x": "y" * 16}, bound="127.0.0.1")).routes}  # type: ignore[arg-type]
    documented = {p.replace("{step_id}", "{step_id:int}") for p in spec["paths"]}
    assert no_token == [401] * 8
    assert cross_site == [403] * 4
    assert form == [415] * 4
    assert served_paths - documented == {"/", "/dashboard/{name:path}", "/openapi.json"}
    assert "SavedPlanRun" in spec["components"]["schemas"]


async def _line_with(stream: Any, needle: str, seen: list[str]) -> str:
    """The first line of ``stream`` holding ``needle`` (every line read kept in ``seen``)."""
    buffered = b""
    with anyio.fail_after(WAIT):
        async for chunk in stream:
            buffered += chunk
            *lines, rest = buffered.split(b"\n")
            buffered = rest
            for line in lines:
                seen.append(line.decode(errors="replace"))
                if needle in seen[-1]:
                    return seen[-1]
    raise AssertionError(f"no line with {needle!r}: {seen}")


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
async def test_the_demo_serves_its_run_in_the_dashboard_until_stopped(
    tmp_path: Path, stop: signal.Signals
) -> None:
    """``plancast demo --serve`` prints the dashboard's address, token and run; the run
    finishes and is served; the page keeps being served after it, until a signal ends
    the command cleanly (exit 0: the run had finished)."""
    port = free_port()
    demo = await anyio.open_process(
        [PLANCAST, "demo", "--serve", "--port", str(port), "--time-scale", "0"],
        cwd=tmp_path, env=clean_env(PLANCAST_DATA_DIR=str(tmp_path / "data")),
        stdout=subprocess.DEVNULL)
    seen: list[str] = []
    try:
        assert demo.stderr is not None
        line = await _line_with(demo.stderr, "dashboard of the demo's run:", seen)
        url = line.rsplit(" ", 1)[1]
        token, run_id = url.split("?token=")[1].split("#")
        assert url.startswith(f"http://127.0.0.1:{port}/?token=")
        await _line_with(demo.stderr, "the dashboard is still at", seen)
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30,
                                      headers={"Authorization": f"Bearer {token}"}) as c:
            run = (await c.get(f"/runs/{run_id}")).json()
            page = await c.get("/")
            me = (await c.get("/me")).json()
        demo.send_signal(stop)
        with anyio.fail_after(WAIT):
            code = await demo.wait()
    finally:
        if demo.returncode is None:
            demo.kill()
            await demo.wait()
    assert run["status"] == "finished", run
    assert page.status_code == 200
    assert me == {"user": getpass.getuser()}
    assert code == 0, seen
    assert not _listening(port)
