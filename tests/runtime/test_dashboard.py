"""The dashboard in a real browser (Debian's Chromium, driven by Playwright): live while a
run goes, correct when opened after it ended, the failed-only filter, a step's output on
click, and text from the run shown as text, never run as markup."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from protocols import RunFailed, RunRequest
from runtime.client import follow, submit
from runtime.process import open_deployment
from runtime.settings import Settings
from runtime.testing import Rule, Scenario, open_scripted_model_server
from runtime.tools import builtin_tools

from ..actors.harness import echo, finish, make_team, plan_line
from .test_gateway import serving_gateway

playwright = pytest.importorskip("playwright.async_api")
CHROMIUM = shutil.which("chromium")
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it)"),
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
                serving_gateway(nats_url, prefix, tmp_path) as url, \
                playwright.async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--no-first-run"])
            page = await browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            accepted = await submit(bus, RunRequest(goal="show me", max_replans=0))
            await page.goto(f"{url}/#{accepted.run_id}")
            # Live: step 2 is drawn running before the run ends.
            await page.wait_for_selector('.row[data-step="2"][data-state="running"]')
            await page.screenshot(path=tmp_path / "dashboard-live.png", full_page=True)
            await page.wait_for_selector("#outcome.failed", timeout=60_000)
            live = await _states(page)
            # Late: a new page replays the ended run from its first event.
            late = await browser.new_page()
            await late.goto(f"{url}/#{accepted.run_id}")
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
            await listing.goto(url)
            await listing.wait_for_selector(f'tr[data-run="{accepted.run_id}"]')
            await browser.close()
            events = [e async for e in follow(bus, accepted.run_id)]
    assert errors == [], errors
    assert isinstance(events[-1], RunFailed)


async def _states(page: playwright.Page) -> dict[str, str]:
    rows = await page.query_selector_all(".row")
    return {str(await r.get_attribute("data-step")): str(await r.get_attribute("data-state"))
            for r in rows}
