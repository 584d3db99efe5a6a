"""The dashboard in a real browser (Debian's Chromium, driven by Playwright): live while a
run goes, correct when opened after it ended, the failed-only filter, a step's output on
click, and text from the run shown as text, never run as markup. Runs of the fan-out
example (its team and scripted model, submitted through the gateway) show a user the
whole DAG to the answer, and with a failing tool the failed step alone under the filter.
Screenshots stay in each test's temporary directory."""

from __future__ import annotations

import shutil
import tomllib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from protocols import RunFailed, RunRequest
from runtime.client import follow, submit
from runtime.config import Settings, team_from_dict
from runtime.testing import Rule, Scenario, open_scripted_model_server, parse_scenario
from runtime.tools import builtin_tools
from runtime.worker import open_deployment

from ..actors.harness import echo, finish, make_team, plan_line
from ..needs import CHROMIUM as CHROMIUM_NEEDED
from ..subprocesses import ROOT
from .test_gateway import Gateway, serving_gateway

playwright = pytest.importorskip("playwright.async_api")
CHROMIUM = shutil.which("chromium")
pytestmark = [
    pytest.mark.anyio,
    CHROMIUM_NEEDED,
]

HOSTILE = "<img src=x onerror=\"document.title='owned'\">"
PLAN = [echo(1, HOSTILE), plan_line(2, tool="sleep", args={"seconds": 3}),
        plan_line(3, tool="math", args={"expression": "1/0"}, depends_on=[2])]
"""Step 1's output is markup; step 2 runs for a while; then step 3 fails for good."""


async def test_the_dashboard_shows_a_run_live_and_late(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    rules = [Rule(role="planner", lines=PLAN), finish("never")]
    async with open_scripted_model_server(Scenario(rules=rules)) as model:
        settings = Settings(nats_url=nats_url, prefix=prefix)
        team = make_team(model.base_url, step_attempts=1)
        async with open_deployment(settings, team, builtin_tools(plugins=False)) as bus, \
                serving_gateway(nats_url, prefix, tmp_path) as served, \
                playwright.async_playwright() as p:
            url = served.url
            browser = await _launch(p)
            page = await browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            accepted = await submit(bus, RunRequest(goal="show me", max_replans=0))
            await page.goto(f"{url}/?token={served.token}#{accepted.run_id}")
            assert page.url == f"{url}/#{accepted.run_id}"  # the token is kept, not shown
            # Live: step 2 is drawn running before the run ends.
            await page.wait_for_selector('.row[data-step="2"][data-state="running"]')
            await page.screenshot(path=tmp_path / "dashboard-live.png", full_page=True)
            await page.wait_for_selector("#outcome.failed", timeout=60_000)
            live = await _states(page)
            # Late: a new page replays the ended run from its first event.
            late = await browser.new_page()
            await late.goto(f"{url}/?token={served.token}#{accepted.run_id}")
            await late.wait_for_selector("#outcome.failed")
            assert await _states(late) == live == {"1": "done", "2": "done", "3": "failed"}
            assert (await late.text_content("#outcome") or "").startswith("failed (")
            await late.check("#failed-only")
            assert [await r.get_attribute("data-step")
                    for r in await late.query_selector_all(".row")] == ["3"]
            await late.screenshot(path=tmp_path / "dashboard-failed-only.png", full_page=True)
            await late.uncheck("#failed-only")
            await late.click('.row[data-step="1"]')
            assert await late.text_content("#detail") == HOSTILE  # text, not an element
            assert await late.query_selector("#detail img") is None
            assert await late.title() == "plancast"
            assert len(await late.query_selector_all("#dag g.node")) == 3
            await late.screenshot(path=tmp_path / "dashboard-late.png", full_page=True)
            # The run list links to the run.
            listing = await browser.new_page()
            await listing.goto(f"{url}/?token={served.token}")
            await listing.wait_for_selector(f'tr[data-run="{accepted.run_id}"]')
            await listing.goto(f"{url}/#{accepted.run_id}")  # the same origin keeps it
            await listing.wait_for_selector("#outcome.failed")
            # Without the token the page says where to find it, and shows nothing.
            stranger = await browser.new_page()
            await stranger.goto(url)
            await stranger.wait_for_selector("#no-token:not([hidden])")
            assert await stranger.query_selector_all("tr[data-run]") == []
            await browser.close()
            events = [e async for e in follow(bus, accepted.run_id)]
    assert errors == [], errors
    assert isinstance(events[-1], RunFailed)


async def _states(page: playwright.Page) -> dict[str, str]:
    rows = await page.query_selector_all(".row")
    return {str(await r.get_attribute("data-step")): str(await r.get_attribute("data-state"))
            for r in rows}


FANOUT = ROOT / "examples" / "fanout"
FANOUT_GOAL = "Add up the squares of 1 to 12, and check the sum with a closed-formula program."
"""The goal ``examples/fanout/run.py`` submits."""


async def test_the_dashboard_follows_the_fanout_example_to_its_answer(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    async with _fanout(nats_url, prefix, tmp_path, _fanout_scenario()) as (served, browser):
        page = await browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        run_id = await _post_run(served, {"goal": FANOUT_GOAL})
        await page.goto(f"{served.url}/?token={served.token}#{run_id}")
        # Live: the plan is drawn while steps run, before the run ends.
        await page.wait_for_selector('#dag g.node rect.running, #dag g.node rect.reviewing')
        assert not await page.query_selector("#outcome.finished")
        await page.screenshot(path=tmp_path / "fanout-live.png", full_page=True)
        await page.wait_for_selector("#outcome.finished", timeout=90_000)
        await page.screenshot(path=tmp_path / "fanout-finished.png", full_page=True)
        # What a user sees at the end: sixteen steps, all done, in the graph and the timeline.
        states = await _states(page)
        assert states == {str(n): "done" for n in range(1, 17)}
        assert len(await page.query_selector_all("#dag g.node rect.done")) == 16
        assert len(await page.query_selector_all("#dag line")) == 15  # into 14, 15 and 16
        assert (await page.text_content("#outcome") or "").startswith(
            "answer: The squares of 1..12 add up to 650")
        # The reviewed step: rejected (its program did not run), redone, approved.
        assert await page.text_content('.row[data-step="1"] .badge') \
            == "attempt 2, critic rejected, critic approved"
        assert "model calls" in (await page.text_content("#usage") or "")
        await page.click('.row[data-step="16"]')
        assert (await page.text_content("#detail") or "").strip() == "650"
        await page.check("#failed-only")
        assert await page.query_selector_all(".row") == []
    assert errors == [], errors


async def test_the_failed_only_filter_shows_the_fanout_step_whose_tool_failed(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """The same example with step 13's arithmetic dividing by zero, and no replans."""
    async with _fanout(nats_url, prefix, tmp_path, _fanout_scenario(failing=True)) \
            as (served, browser):
        page = await browser.new_page()
        run_id = await _post_run(served, {"goal": FANOUT_GOAL, "max_replans": 0})
        await page.goto(f"{served.url}/?token={served.token}#{run_id}")
        await page.wait_for_selector("#outcome.failed", timeout=90_000)
        states = await _states(page)
        assert states["13"] == "failed"
        assert {states[str(n)] for n in range(2, 13)} == {"done"}
        assert (await page.text_content("#outcome") or "").startswith("failed (")
        await page.screenshot(path=tmp_path / "fanout-failed.png", full_page=True)
        await page.check("#failed-only")
        assert [await r.get_attribute("data-step")
                for r in await page.query_selector_all(".row")] == ["13"]
        await page.click('.row[data-step="13"]')
        assert "division by zero" in (await page.text_content("#detail") or "")
        await page.screenshot(path=tmp_path / "fanout-failed-only.png", full_page=True)


def _fanout_scenario(*, failing: bool = False) -> Scenario:
    text = (FANOUT / "scenario.toml").read_text()
    if failing:
        assert '"12**2"' in text
        text = text.replace('"12**2"', '"12/0"')
    return parse_scenario(text, source="examples/fanout/scenario.toml")


@asynccontextmanager
async def _fanout(nats_url: str, prefix: str, tmp_path: Path,
                  scenario: Scenario) -> AsyncIterator[tuple[Gateway, Any]]:
    """The fan-out example's team on its scripted model (three times slower, so the run is
    seen live), the gateway, and a browser."""
    async with open_scripted_model_server(scenario, time_scale=3) as model:
        data = tomllib.loads((FANOUT / "team.toml").read_text())
        data["models"]["scripted"]["base_url"] = model.base_url
        team = team_from_dict(data, source="examples/fanout/team.toml")
        settings = Settings(nats_url=nats_url, prefix=prefix)
        async with open_deployment(settings, team, builtin_tools(plugins=False)), \
                serving_gateway(nats_url, prefix, tmp_path) as served, \
                playwright.async_playwright() as p:
            browser = await _launch(p)
            try:
                yield served, browser
            finally:
                await browser.close()


async def _post_run(served: Gateway, body: dict[str, Any]) -> str:
    async with served.client() as client:
        response = await client.post("/runs", json=body)
    assert response.status_code == 202, response.text
    return str(response.json()["run_id"])


async def _launch(p: Any) -> Any:
    return await p.chromium.launch(executable_path=CHROMIUM, args=[
        "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run"])
