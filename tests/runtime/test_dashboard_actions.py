"""Acting on runs from the dashboard in a real browser (Debian's Chromium, driven by
Playwright), against a real deployment, a real ``plancast serve`` and the scripted model:
a plan held for approval approved, edited (refused inline, then run) and rejected; a step
held at its gate rejected into a replan; a run cancelled with every step ended; a replan
asked for; goals (and a saved plan with its parameters) submitted from the run list; and a
cross-site form post refused. Each decision's event names the gateway's user (GET /me).
The plan review and saved plan examples' teams run where they fit. Screenshots stay in each
test's temporary directory."""

from __future__ import annotations

import copy
import importlib.util
import json
import secrets
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from protocols import (
    OutcomeRefused,
    PlanApproved,
    PlanRejected,
    ReplanStarted,
    RunEvent,
    RunFailed,
    RunFinished,
    StepApproved,
    StepFailed,
    StepFinished,
)
from runtime.bus import Bus
from runtime.client import follow, load, store_plan
from runtime.config import Settings, TeamConfig, team_from_dict
from runtime.testing import Rule, Scenario, open_scripted_model_server
from runtime.tools import builtin_tools
from runtime.worker import open_deployment

from ..actors.harness import echo, finish, make_team, plan_line
from ..needs import CHROMIUM as CHROMIUM_NEEDED
from ..subprocesses import ROOT
from .test_dashboard import _launch, _states
from .test_gateway import Gateway, serving_gateway

playwright = pytest.importorskip("playwright.async_api")
pytestmark = [
    pytest.mark.anyio,
    CHROMIUM_NEEDED,
]

WAIT = 60_000
"""Milliseconds a page may take to show what a step of a test waits for."""
ENDED = "#outcome.finished, #outcome.failed"


def _example(name: str) -> ModuleType:
    """``examples/<name>/run.py`` as a module: its team and scripted model's rules."""
    path = ROOT / "examples" / name / "run.py"
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PLAN_REVIEW = _example("plan_review")
SAVED_PLAN = _example("saved_plan")


def _team(example: ModuleType, base_url: str, **changes: Any) -> TeamConfig:
    data = copy.deepcopy(example.TEAM)
    data["models"]["scripted"]["base_url"] = base_url
    for role, fields in changes.items():
        data["roles"][role].update(fields)
    return team_from_dict(data, source=f"examples/{example.__name__}")


@dataclass
class Room:
    """A deployment, its gateway, a browser page signed in to it, and the gateway's user."""

    bus: Bus
    served: Gateway
    page: Any
    browser: Any
    user: str
    errors: list[str]

    async def open(self, run_id: str = "") -> None:
        await self.page.goto(f"{self.served.url}/?token={self.served.token}"
                             + (f"#{run_id}" if run_id else ""))

    async def submit(self, body: dict[str, Any]) -> str:
        async with self.served.client() as client:
            response = await client.post("/runs", json=body)
        assert response.status_code == 202, response.text
        return str(response.json()["run_id"])

    async def events(self, run_id: str) -> list[RunEvent]:
        return [e async for e in follow(self.bus, run_id)]


@asynccontextmanager
async def _room(nats_url: str, prefix: str, tmp_path: Path, scenario: Scenario,
                team: Any) -> AsyncIterator[Room]:
    """``team(base_url)`` deployed on the scripted model, ``plancast serve`` for two users
    (a users file), a page signed in as the first, alice."""
    tokens = {"alice": secrets.token_urlsafe(24), "bob": secrets.token_urlsafe(24)}
    users = tmp_path / "gateway.users"
    users.write_text("".join(f"{name} {token}\n" for name, token in tokens.items()))
    users.chmod(0o600)
    async with open_scripted_model_server(scenario) as model:
        settings = Settings(nats_url=nats_url, prefix=prefix)
        async with open_deployment(settings, team(model.base_url),
                                   builtin_tools(plugins=False)) as bus, \
                serving_gateway(nats_url, prefix, tmp_path, "--users", str(users),
                                PLANCAST_GATEWAY_TOKEN=tokens["alice"]) as served, \
                playwright.async_playwright() as p:
            async with served.client() as client:
                me = await client.get("/me")
            assert me.status_code == 200, me.text
            user = me.json()["user"]
            assert user == "alice"
            browser = await _launch(p)
            try:
                page = await browser.new_page()
                page.set_default_timeout(WAIT)
                errors: list[str] = []
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                yield Room(bus, served, page, browser, user, errors)
                assert errors == [], errors
            finally:
                await browser.close()


def _plan_review(nats_url: str, prefix: str, tmp_path: Path, *first: Rule,
                 **changes: Any) -> Any:
    """The plan review example's team and model (``first``: rules before its own)."""
    return _room(nats_url, prefix, tmp_path, Scenario(rules=[*first, *PLAN_REVIEW.RULES]),
                 lambda url: _team(PLAN_REVIEW, url, **changes))


CANARY_REPLAN = Rule(role="planner", contains="A new plan is needed",
                     lines=[PLAN_REVIEW.step(3, "build"),
                            PLAN_REVIEW.step(4, "deploy $3 to canary", 3)])
"""A replan after a step failed: new steps (new ids), to canary."""


async def test_a_plan_held_for_approval_is_approved_from_the_page_and_runs(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    async with _plan_review(nats_url, prefix, tmp_path) as room:
        run_id = await room.submit({"goal": "ship it", "review_plan": "human"})
        await room.open(run_id)
        page = room.page
        review = await page.wait_for_selector("#actions section.plan-review")
        assert "deploy $1 to production" in await page.input_value("textarea.plan-steps")
        assert room.user in (await page.text_content("#actions legend") or "")
        await page.screenshot(path=tmp_path / "actions-plan-awaiting.png", full_page=True)
        await review.wait_for_selector('[data-act="approve-plan"]')
        await page.click('[data-act="approve-plan"]')
        await page.wait_for_selector(ENDED)
        assert await page.text_content("#outcome") == "answer: deployed"
        await page.wait_for_selector("#actions", state="hidden")  # nothing to act on now
        await page.screenshot(path=tmp_path / "actions-plan-approved.png", full_page=True)
        events = await room.events(run_id)
    assert [(room.user in e.by, e.edited) for e in events if isinstance(e, PlanApproved)] \
        == [(True, False)]
    assert isinstance(events[-1], RunFinished)


async def test_an_edited_plan_is_refused_inline_then_a_valid_edit_runs(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    async with _plan_review(nats_url, prefix, tmp_path) as room:
        run_id = await room.submit({"goal": "ship it", "review_plan": "human"})
        await room.open(run_id)
        page = room.page
        await page.wait_for_selector("#actions section.plan-review")
        proposed = json.loads(await page.input_value("textarea.plan-steps"))
        # Not JSON: said at once, nothing sent.
        await page.fill("textarea.plan-steps", "[{not json")
        await page.click('[data-act="edit-plan"]')
        assert "not JSON" in (await page.text_content(".plan-error") or "")
        # A role the team does not have: the planner refuses it, the page says why, inline,
        # with the editor as it was left; the buttons are disabled while it is asked.
        invalid = [{**step, "role": "nobody"} for step in proposed]
        typed = json.dumps(invalid, indent=1)
        await page.fill("textarea.plan-steps", typed)
        disabled = await page.evaluate("""() => {
            const button = document.querySelector('[data-act="edit-plan"]');
            button.click();
            return button.matches(":disabled");
        }""")
        assert disabled is True
        await page.wait_for_function(
            "() => /nobody/.test(document.querySelector('.plan-error').textContent)")
        assert await page.input_value("textarea.plan-steps") == typed
        assert await page.is_enabled('[data-act="edit-plan"]')
        await page.screenshot(path=tmp_path / "actions-plan-refused.png", full_page=True)
        # A valid edit: staging instead of production, run to the answer.
        staged = [{**step, "args": {"text": step["args"]["text"].replace(
            "production", "staging")}} for step in proposed]
        await page.fill("textarea.plan-steps", json.dumps(staged))
        await page.click('[data-act="edit-plan"]')
        await page.wait_for_selector(ENDED)
        assert await page.text_content("#outcome") == "answer: deployed"
        events = await room.events(run_id)
    refused = [e for e in events if isinstance(e, OutcomeRefused)]
    assert [room.user in e.sender for e in refused] == [True]
    assert "nobody" in refused[0].reason
    approved = [e for e in events if isinstance(e, PlanApproved)]
    assert [(room.user in e.by, e.edited) for e in approved] == [(True, True)]
    outputs = [e.output for e in events if isinstance(e, StepFinished)]
    assert any("staging" in o for o in outputs) and not any("production" in o for o in outputs)
    assert isinstance(events[-1], RunFinished)


async def test_a_rejected_plan_is_planned_again_from_the_reason(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    async with _plan_review(nats_url, prefix, tmp_path) as room:
        run_id = await room.submit({"goal": "ship it", "review_plan": "human"})
        await room.open(run_id)
        page = room.page
        first = await page.wait_for_selector("#actions section.plan-review")
        digest = await first.get_attribute("data-digest")
        await page.click('[data-act="reject-plan"]')
        await page.fill('input[name="reject-plan-reason"]',
                        "never production; deploy to canary first")
        await page.click('[data-act="reject-plan-confirm"]')
        second = await page.wait_for_selector(
            f'#actions section.plan-review:not([data-digest="{digest}"])')
        assert "canary" in await page.input_value("textarea.plan-steps")
        await (await second.wait_for_selector('[data-act="approve-plan"]')).click()
        await page.wait_for_selector(ENDED)
        assert await page.text_content("#outcome") == "answer: deployed"
        events = await room.events(run_id)
    rejected = [e for e in events if isinstance(e, PlanRejected)]
    assert len(rejected) == 1 and f"rejected by {room.user}" in rejected[0].error
    assert "never production" in rejected[0].error
    assert [room.user in e.by for e in events if isinstance(e, PlanApproved)] == [True]
    assert isinstance(events[-1], RunFinished)


async def test_a_step_rejected_at_its_gate_fails_into_a_replan_approved_from_the_page(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """The plan review example's team with every ``ops`` step held at a gate: the first
    plan's step 1 is rejected from the page, fails, and the run replans from the reason; each
    step of the new plan is approved from the page, and the run answers."""
    async with _plan_review(nats_url, prefix, tmp_path, CANARY_REPLAN,
                            ops={"approval": True}) as room:
        run_id = await room.submit({"goal": "ship it", "max_replans": 1})
        await room.open(run_id)
        page = room.page
        gate = await page.wait_for_selector('#actions section.gate[data-step="1"]')
        await page.screenshot(path=tmp_path / "actions-step-gate.png", full_page=True)
        await (await gate.wait_for_selector('[data-act="reject-step"]')).click()
        reason = await gate.wait_for_selector("input.reason")
        await reason.type("never production")
        # The page draws the run again (as after each batch of its events): the reason being
        # typed keeps its text and its focus.
        kept = await page.evaluate("""async () => {
            const { currentRun } = await import("/dashboard/app.js");
            const run = currentRun();
            const input = document.querySelector("section.gate input.reason");
            document.dispatchEvent(new CustomEvent("plancast:run",
                { detail: { runId: run.runId, state: run } }));
            return document.activeElement === input && input.value;
        }""")
        assert kept == "never production"
        await reason.type("; deploy to canary first")
        await (await gate.wait_for_selector('[data-act="reject-step-confirm"]')).click()
        await gate.wait_for_element_state("hidden")  # gone: the step failed
        # The new round's steps, each approved at its gate as it comes.
        approved: list[str] = []
        while True:
            found = await page.wait_for_selector(
                ", ".join([ENDED, "#actions section.gate" + "".join(
                    f':not([data-key="{key}"])' for key in approved)]))
            key = await found.get_attribute("data-key")
            if key is None:
                break
            await (await found.wait_for_selector('[data-act="approve-step"]')).click()
            approved.append(key)
        assert await page.text_content("#outcome") == "answer: deployed"
        events = await room.events(run_id)
    declined = [e for e in events if isinstance(e, StepFailed) and e.cause == "declined"]
    assert len(declined) == 1 and f"rejected by {room.user}" in declined[0].error
    assert len([e for e in events if isinstance(e, ReplanStarted)]) == 1
    assert [room.user in e.by for e in events if isinstance(e, StepApproved)] == [True] * 2
    assert len(approved) == 2
    outputs = [e.output for e in events if isinstance(e, StepFinished)]
    assert any("canary" in o for o in outputs) and not any("production" in o for o in outputs)
    assert isinstance(events[-1], RunFinished)


SLEEPS = [plan_line(1, tool="sleep", args={"seconds": 60}),
          plan_line(2, tool="sleep", args={"seconds": 60}),
          echo(3, "after $1 and $2", depends_on=[1, 2])]
"""Two steps that run until they are stopped, and one after them."""


async def test_a_cancelled_run_ends_with_every_step_ended(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    scenario = Scenario(rules=[Rule(role="planner", lines=SLEEPS), finish("never")])
    async with _room(nats_url, prefix, tmp_path, scenario, make_team) as room:
        run_id = await room.submit({"goal": "sleep on it", "max_replans": 0})
        await room.open(run_id)
        page = room.page
        await page.wait_for_selector('.row[data-step="1"][data-state="running"]')
        await page.wait_for_selector('.row[data-step="2"][data-state="running"]')
        # No replans allowed: asking for one is refused, and the page says why, inline.
        await page.click('[data-act="replan"]')
        await page.fill('input[name="replan-reason"]', "try again")
        await page.click('[data-act="replan-confirm"]')
        await page.wait_for_function("""() => /no replans left/.test(
            document.querySelector("#actions .action-error").textContent)""")
        await page.click('[data-act="cancel"]')
        await page.fill('input[name="cancel-reason"]', "not needed any more")
        await page.screenshot(path=tmp_path / "actions-cancel.png", full_page=True)
        await page.click('[data-act="cancel-confirm"]')
        await page.wait_for_selector("#outcome.failed")
        assert "cancelled" in (await page.text_content("#outcome") or "")
        await page.wait_for_selector("#actions", state="hidden")
        assert await _states(page) == {"1": "cancelled", "2": "cancelled", "3": "pending"}
        await page.screenshot(path=tmp_path / "actions-cancelled.png", full_page=True)
        events = await room.events(run_id)
    last = events[-1]
    assert isinstance(last, RunFailed) and last.cause == "cancelled"
    assert room.user in last.reason and "not needed any more" in last.reason


async def test_a_replan_asked_for_from_the_page_plans_again(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    rules = [Rule(role="planner", contains="the quick way", lines=[echo(4, "quick")]),
             Rule(role="planner", lines=SLEEPS), finish("done the quick way")]
    async with _room(nats_url, prefix, tmp_path, Scenario(rules=rules), make_team) as room:
        run_id = await room.submit({"goal": "sleep on it", "max_replans": 1})
        await room.open(run_id)
        page = room.page
        await page.wait_for_selector('.row[data-step="1"][data-state="running"]')
        await page.click('[data-act="replan"]')
        await page.fill('input[name="replan-reason"]', "do it the quick way")
        await page.click('[data-act="replan-confirm"]')
        await page.wait_for_selector(ENDED)
        assert await page.text_content("#outcome") == "answer: done the quick way"
        events = await room.events(run_id)
    replans = [e for e in events if isinstance(e, ReplanStarted)]
    assert len(replans) == 1 and room.user in replans[0].source
    assert "the quick way" in replans[0].reason
    assert isinstance(events[-1], RunFinished)


async def test_goals_and_saved_plans_are_submitted_from_the_run_list(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """The saved plan example's team: its plan stored, picked with its parameters in the
    page's form (and its own goal), and run; then a goal for the planner, held for review as
    the form asked."""
    rules = [Rule(role="planner", lines=[plan_line(1, "calc", tool="math",
                                                   args={"expression": "6*7"})]),
             Rule(role="synthesizer", text=SAVED_PLAN.ANSWER)]
    async with _room(nats_url, prefix, tmp_path, Scenario(rules=rules),
                     lambda url: _team(SAVED_PLAN, url)) as room:
        await store_plan(room.bus, "capacity", load(SAVED_PLAN.HERE / "capacity.json"))
        page = room.page
        await room.open()
        await page.wait_for_selector("#submit-form")
        # A goal of blanks passes the form but not the gateway: its reason, inline, as text.
        await page.fill('textarea[name="goal"]', "   ")
        await page.click('#submit-form button[type="submit"]')
        await page.wait_for_function(
            "() => /goal/.test(document.querySelector('#submit-error').textContent)")
        assert "#" not in page.url
        await page.wait_for_selector('select[name="saved_plan"] option[value="capacity"]',
                                     state="attached")
        await page.select_option('select[name="saved_plan"]', "capacity")
        for name, value in {"service": "auth", "replicas": "3",
                            "rps_per_replica": "250"}.items():
            await page.fill(f'input[data-param="{name}"]', value)
        await page.screenshot(path=tmp_path / "actions-submit.png", full_page=True)
        await page.click('#submit-form button[type="submit"]')
        await page.wait_for_url(f"{room.served.url}/#run-*")
        saved_run = page.url.partition("#")[2]
        await page.wait_for_selector(ENDED)
        assert await page.text_content("#outcome") == "answer: see the report step"
        saved_events = await room.events(saved_run)
        # A goal for the planner's model, with its plan held for a person's review.
        await room.open()
        await page.wait_for_selector("#submit-form")
        await page.fill('textarea[name="goal"]', "What is six times seven?")
        await page.select_option('select[name="review_plan"]', "human")
        await page.click('#submit-form button[type="submit"]')
        await page.wait_for_url(lambda url: "#run-" in url and saved_run not in url)
        goal_run = page.url.partition("#")[2]
        await page.wait_for_selector("#actions section.plan-review")
        await page.screenshot(path=tmp_path / "actions-submitted-for-review.png",
                              full_page=True)
        await page.click('[data-act="approve-plan"]')
        await page.wait_for_selector(ENDED)
        goal_events = await room.events(goal_run)
        async with room.served.client() as client:
            listed = {r["run_id"]: r["goal"] for r in (await client.get("/runs")).json()}
    assert listed == {saved_run: "How many requests per second can auth serve?",
                      goal_run: "What is six times seven?"}
    assert "auth serves 750 requests per second" in [
        e.output for e in saved_events if isinstance(e, StepFinished)]
    assert isinstance(saved_events[-1], RunFinished)
    assert [room.user in e.by for e in goal_events if isinstance(e, PlanApproved)] == [True]
    assert "42" in [e.output for e in goal_events if isinstance(e, StepFinished)]


class _HostilePage(BaseHTTPRequestHandler):
    """Another origin's page: a form that posts a run to the gateway (a "simple" request:
    no preflight, and the page cannot read the answer) as soon as it is clicked."""

    target = ""

    def do_GET(self) -> None:
        body = f"""<!doctype html><title>elsewhere</title>
<form method="post" action="{self.target}/runs" enctype="text/plain">
<input type="hidden" name='{{"goal": "from elsewhere", "x": "' value='"}}'>
<button id="go">go</button></form>""".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


async def test_a_form_posted_from_another_origin_is_refused_and_starts_no_run(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    scenario = Scenario(rules=[Rule(role="planner", lines=[echo(1, "hi")]), finish("hi")])
    async with _room(nats_url, prefix, tmp_path, scenario, make_team) as room:
        handler = type("Hostile", (_HostilePage,), {"target": room.served.url})
        elsewhere = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        thread = threading.Thread(target=elsewhere.serve_forever, daemon=True)
        thread.start()
        try:
            page = room.page
            await room.open()  # the page holds the gateway's token in its own origin
            await page.wait_for_selector("#submit-form")
            hostile = await room.browser.new_page()
            await hostile.goto(f"http://127.0.0.1:{elsewhere.server_port}/")
            async with hostile.expect_response(f"{room.served.url}/runs") as answered:
                await hostile.click("#go")
            response = await answered.value
            assert response.status == 403
            assert "origin" in (await response.json())["error"]
            await hostile.screenshot(path=tmp_path / "actions-cross-site-refused.png")
        finally:
            elsewhere.shutdown()
            elsewhere.server_close()
            thread.join(timeout=10)
        async with room.served.client() as client:
            assert (await client.get("/runs")).json() == []
