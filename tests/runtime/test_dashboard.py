"""The dashboard in a real browser (Debian's Chromium, driven by Playwright): live while a
run goes, correct when opened after it ended or reloaded halfway, the failed-only filter, a
step's panel on click, and text from the run shown as text, never run as markup. The
timeline has a time axis, a legend for every colour, planner and synthesis rows, and every
attempt, critic review and wait for a person as its own segment with its cause; a
cancelled run shows nothing running. Runs of the fan-out example (its team and scripted
model, submitted through the gateway) show the whole DAG to the answer, laid out so that
the edges into different steps stay apart; the hierarchy example's runs are a tree one
walks parent → child → parent. Screenshots stay in each test's temporary directory."""

from __future__ import annotations

import re
import shutil
import tomllib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from protocols import RunFailed, RunRequest
from runtime.client import cancel, decide_plan, decide_step, follow, submit
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
LONG = "x" * 5000
PLAN = [echo(1, HOSTILE), plan_line(2, tool="sleep", args={"seconds": 3}),
        plan_line(3, tool="math", args={"expression": "1/0"}, depends_on=[2]), echo(4, LONG)]
"""Step 1's output is markup; step 2 runs for a while; then step 3 fails, twice; step 4's
output is too long for its event."""
SEQS = "import('/dashboard/app.js').then((m) => m.currentRun().events.map((e) => e.seq))"
PERF = "import('/dashboard/app.js').then((m) => ({...m.perf}))"


async def test_the_dashboard_shows_a_run_live_and_late(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    rules = [Rule(role="planner", lines=PLAN), finish("never")]
    async with open_scripted_model_server(Scenario(rules=rules)) as model:
        settings = Settings(nats_url=nats_url, prefix=prefix)
        team = make_team(model.base_url, step_attempts=2)
        async with open_deployment(settings, team, builtin_tools(plugins=False)) as bus, \
                serving_gateway(nats_url, prefix, tmp_path) as served, \
                _cuttable(served.url) as cuttable, \
                playwright.async_playwright() as p:
            url = served.url
            browser = await _launch(p)
            page = await browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            accepted = await submit(bus, RunRequest(goal="show me", max_replans=0))
            await page.goto(f"{url}/?token={served.token}#{accepted.run_id}")
            assert page.url == f"{url}/#{accepted.run_id}"  # the token is kept, not shown
            # Two more pages: one reloaded halfway, one whose connection drops halfway.
            reloaded = await browser.new_page()
            reloaded.on("pageerror", lambda exc: errors.append(str(exc)))
            await reloaded.goto(f"{url}/?token={served.token}#{accepted.run_id}")
            dropped = await browser.new_page()
            dropped.on("pageerror", lambda exc: errors.append(str(exc)))
            await dropped.goto(f"{cuttable.url}/?token={served.token}#{accepted.run_id}")
            # Live: step 2 is drawn running before the run ends.
            await page.wait_for_selector('.row[data-step="2"][data-state="running"]')
            await page.screenshot(path=tmp_path / "dashboard-live.png", full_page=True)
            # While step 2's bar grows, step 1's finished bar stays where it is (unless the
            # run outgrew the scale meanwhile, which doubles it: a loaded machine's slow
            # run; then it is watched again on the new scale).
            done, running = (f'.row[data-step="{n}"] .seg[data-attempt="1"]' for n in (1, 2))
            look = ("(bars) => [document.querySelector('.tl-axis .tick:last-child')"
                    ".textContent, ...bars.map((b) => document.querySelector(b)"
                    ".getAttribute('style'))]")
            for _ in range(3):  # one moment's scale and bars, read at once
                scale, placed, was = await page.evaluate(look, [done, running])
                await page.wait_for_function("([bar, was]) => document.querySelector(bar)"
                                             ".getAttribute('style') !== was", arg=[running, was])
                now = await page.evaluate(look, [done, running])
                if now[0] == scale:
                    break
            assert now[:2] == [scale, placed]
            await reloaded.wait_for_selector('.row[data-step="2"][data-state="running"]')
            await reloaded.reload()
            await dropped.wait_for_selector('.row[data-step="2"][data-state="running"]')
            await cuttable.cut()  # its connections break; it reconnects (Last-Event-ID)
            await dropped.wait_for_selector("#connection:not([hidden])")
            await page.wait_for_selector("#outcome.failed", timeout=60_000)
            live = await _states(page)
            # Late: a new page replays the ended run from its first event.
            late = await browser.new_page()
            await late.goto(f"{url}/?token={served.token}#{accepted.run_id}")
            await late.wait_for_selector("#outcome.failed")
            assert await _states(late) == live == {"1": "done", "2": "done", "3": "failed",
                                                   "4": "done"}
            assert (await late.text_content("#outcome") or "").startswith("failed (")
            # Every page ends with the same events, each once.
            for other in (reloaded, dropped):
                await other.wait_for_selector("#outcome.failed", timeout=60_000)
            events = [e async for e in follow(bus, accepted.run_id)]
            every = [e.seq for e in events]
            for other in (page, reloaded, dropped, late):
                assert await other.evaluate(SEQS) == every
            assert (await dropped.evaluate(PERF))["connections"] >= 2  # it did reconnect
            # The time axis starts at 0 s; the legend names every colour drawn.
            ticks = [await t.text_content() for t in await late.query_selector_all(".tick")]
            assert ticks[0] == "0s" and len(ticks) >= 3, ticks
            drawn = await late.eval_on_selector_all(
                ".seg", "(segs) => [...new Set(segs.flatMap((s) => [...s.classList]))]")
            keys = await late.eval_on_selector_all(
                ".legend .swatch", "(ks) => ks.map((k) => k.classList[1])")
            assert set(drawn) - {"seg", "mark", "refused"} <= set(keys), (drawn, keys)
            assert await late.query_selector('.phase-row[data-phase="planner"] .seg.planning')
            # Each attempt its own segment, its cause on hover.
            attempts = await late.query_selector_all('.row[data-step="3"] .seg[data-attempt]')
            assert [await a.get_attribute("data-state") for a in attempts] \
                == ["retried", "failed"]
            for a in attempts:
                assert "division by zero" in (await a.get_attribute("title") or "")
            await late.check("#failed-only")
            await late.wait_for_selector('.row[data-step="1"]', state="detached")
            assert [await r.get_attribute("data-step")
                    for r in await late.query_selector_all(".row")] == ["3"]
            await late.screenshot(path=tmp_path / "dashboard-failed-only.png", full_page=True)
            await late.uncheck("#failed-only")
            await late.wait_for_selector('.row[data-step="1"]')
            await late.click('.row[data-step="3"]')
            assert [await c.text_content() for c in await late.query_selector_all(
                '#panel table.attempts td.state')] == ["retried", "failed"]
            await late.click('.row[data-step="1"]')
            await late.wait_for_selector('#detail-title:text("step 1")')
            assert await late.text_content("#detail") == HOSTILE  # text, not an element
            assert await late.query_selector("#panel img") is None
            assert await late.query_selector("#timeline img, #dag img") is None
            assert await late.title() == "plancast"
            assert len(await late.query_selector_all("#dag g.node")) == 4
            # A long output: its event's part, and a button fetching it whole.
            await late.click('.row[data-step="4"]')
            await late.wait_for_selector('#detail-title:text("step 4")')
            assert (await late.text_content("#detail") or "").endswith("x…")
            assert await late.query_selector("#panel button.whole-output")
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
    assert errors == [], errors
    assert isinstance(events[-1], RunFailed)


async def test_a_cancelled_run_shows_no_step_running(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """The run is cancelled while its step sleeps: the step's bar ends, "cancelled". Its
    model has prices, so its cost shows."""
    rules = [Rule(role="planner", lines=[plan_line(1, tool="sleep", args={"seconds": 60})]),
             finish("never")]
    async with open_scripted_model_server(Scenario(rules=rules)) as model:
        settings = Settings(nats_url=nats_url, prefix=prefix)
        priced = make_team(model.base_url, model={"prompt_price_per_mtok": 3.0,
                                                  "completion_price_per_mtok": 15.0})
        async with open_deployment(settings, priced, builtin_tools(plugins=False)) as bus, \
                serving_gateway(nats_url, prefix, tmp_path) as served, \
                playwright.async_playwright() as p:
            browser = await _launch(p)
            page = await browser.new_page()
            await page.goto(f"{served.url}/?token={served.token}")  # nothing has run yet
            await page.wait_for_selector("#empty:not([hidden])")
            assert "plancast run" in (await page.text_content("#empty") or "")
            accepted = await submit(bus, RunRequest(goal="wait", max_replans=0))
            await page.goto(f"{served.url}/?token={served.token}#{accepted.run_id}")
            await page.wait_for_selector('.row[data-step="1"][data-state="running"]')
            await cancel(bus, accepted.run_id, "enough")
            await page.wait_for_selector("#outcome.failed", timeout=60_000)
            assert await page.query_selector_all(
                '[data-state="running"], .seg.running, #dag rect.running') == []
            assert await _states(page) == {"1": "cancelled"}
            segment = await page.query_selector('.row[data-step="1"] .seg[data-attempt="1"]')
            assert segment is not None
            assert await segment.get_attribute("data-state") == "cancelled"
            assert "cancelled" in (await segment.get_attribute("title") or "")
            # The planner's call had a price: the run's cost shows (none without prices).
            assert re.search(r"\$0\.\d{4}", await page.text_content("#usage") or "")
            await page.screenshot(path=tmp_path / "dashboard-cancelled.png", full_page=True)
            await browser.close()


async def test_a_step_failing_once_then_succeeding_shows_both_attempts(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """The writer's model fails its first call: attempt 1 ends "retried" with the error,
    attempt 2 "done", each its own segment, both in the step's panel."""
    rules = [Rule(role="planner", lines=[plan_line(1, role="writer", instruction="A word.")]),
             Rule(role="writer", error=500, error_message="model overloaded", times=1),
             Rule(role="writer", text="word"), finish("ok")]
    async with open_scripted_model_server(Scenario(rules=rules)) as model:
        settings = Settings(nats_url=nats_url, prefix=prefix)
        team = make_team(model.base_url, roles={"writer": {"description": "writes",
                                                           "model": "scripted"}})
        async with open_deployment(settings, team, builtin_tools(plugins=False)) as bus, \
                serving_gateway(nats_url, prefix, tmp_path) as served, \
                playwright.async_playwright() as p:
            browser = await _launch(p)
            page = await browser.new_page()
            accepted = await submit(bus, RunRequest(goal="a word"))
            await page.goto(f"{served.url}/?token={served.token}#{accepted.run_id}")
            await page.wait_for_selector("#outcome.finished", timeout=60_000)
            segments = await page.query_selector_all('.row[data-step="1"] .seg[data-attempt]')
            assert [await a.get_attribute("data-state") for a in segments] == ["retried", "done"]
            assert "model overloaded" in (await segments[0].get_attribute("title") or "")
            await page.click('.row[data-step="1"]')
            assert [await c.text_content() for c in await page.query_selector_all(
                "#panel table.attempts td.state")] == ["retried", "done"]
            await page.screenshot(path=tmp_path / "dashboard-retried.png", full_page=True)
            await browser.close()


async def test_waits_for_a_person_are_segments_of_their_own(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """The plan waits for a person: its wait is a segment of the plan-review row, open
    until the decision, then closed with who decided; the page's run model says it waits.
    So does step 2's wait at its role's approval gate, in its own row."""
    rules = [Rule(role="planner", lines=[echo(1, "hi"), echo(2, "later", role="gated")]),
             finish("ok")]
    async with open_scripted_model_server(Scenario(rules=rules)) as model:
        settings = Settings(nats_url=nats_url, prefix=prefix)
        team = make_team(model.base_url, roles={"gated": {
            "description": "needs a person", "tools": ["echo"], "tool_steps_only": True,
            "approval": True}})
        async with open_deployment(settings, team, builtin_tools(plugins=False)) as bus, \
                serving_gateway(nats_url, prefix, tmp_path) as served, \
                playwright.async_playwright() as p:
            browser = await _launch(p)
            page = await browser.new_page()
            accepted = await submit(bus, RunRequest(goal="hold it", review_plan="human"))
            await page.goto(f"{served.url}/?token={served.token}#{accepted.run_id}")
            held = '.phase-row[data-phase="plan-review"] .seg.awaiting'
            await page.wait_for_selector(held)
            assert await page.text_content("#outcome") == "the plan awaits approval"
            assert await page.evaluate(
                "import('/dashboard/app.js').then((m) => m.currentRun().awaitingPlan.round)") == 0
            await decide_plan(bus, accepted.run_id, approved=True, by="ada")
            gate = '.row[data-step="2"] .seg.awaiting'
            await page.wait_for_selector('.row[data-step="2"][data-state="awaiting"] .seg.awaiting')
            assert await page.evaluate("import('/dashboard/app.js').then((m) => "
                                       "[...m.currentRun().awaitingGates.keys()])") == [2]
            await decide_step(bus, accepted.run_id, 2, approved=True, by="bob")
            await page.wait_for_selector("#outcome.finished")
            assert "approved by bob" in (await page.get_attribute(gate, "title") or "")
            assert "approved by ada" in (await page.get_attribute(held, "title") or "")
            planning = await page.eval_on_selector(  # the planner's bar ends where the wait begins
                '.phase-row[data-phase="planner"] .seg', "(e) => e.getBoundingClientRect().right")
            waiting = await page.eval_on_selector(held, "(e) => e.getBoundingClientRect().left")
            assert planning <= waiting + 1
            await page.screenshot(path=tmp_path / "dashboard-plan-review.png", full_page=True)
            await browser.close()


class _Cuttable:
    """A TCP relay to the gateway whose connections the test can break, as a network does."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.live: set[anyio.abc.SocketStream] = set()

    async def cut(self) -> None:
        for stream in list(self.live):
            await stream.aclose()


@asynccontextmanager
async def _cuttable(target: str) -> AsyncIterator[_Cuttable]:
    port = int(target.rsplit(":", 1)[1])
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    relay = _Cuttable(listener.extra(anyio.abc.SocketAttribute.local_port))

    async def pump(source: anyio.abc.SocketStream, sink: anyio.abc.SocketStream,
                   scope: anyio.CancelScope) -> None:
        with suppress(anyio.EndOfStream, anyio.ClosedResourceError,
                      anyio.BrokenResourceError, OSError):
            async for chunk in source:
                await sink.send(chunk)
        scope.cancel()

    async def handle(client: anyio.abc.SocketStream) -> None:
        async with client, await anyio.connect_tcp("127.0.0.1", port) as upstream:
            relay.live |= {client, upstream}
            try:
                async with anyio.create_task_group() as pumps:
                    pumps.start_soon(pump, client, upstream, pumps.cancel_scope)
                    pumps.start_soon(pump, upstream, client, pumps.cancel_scope)
            finally:
                relay.live -= {client, upstream}

    async with listener, anyio.create_task_group() as tasks:
        tasks.start_soon(listener.serve, handle)
        yield relay
        tasks.cancel_scope.cancel()


async def _states(page: playwright.Page) -> dict[str, str]:
    rows = await page.query_selector_all(".row")
    return {str(await r.get_attribute("data-step")): str(await r.get_attribute("data-state"))
            for r in rows}


CROSSINGS = """() => {
  const edges = [...document.querySelectorAll("#dag path.edge")].map((e) => ({
    from: e.dataset.from, to: e.dataset.to,
    points: e.getAttribute("d").replace(/[ML]/g, " ").trim().split(/\\s+/).map(Number)}));
  const segments = (p) => { const s = [];
    for (let i = 0; i + 3 < p.length; i += 2) s.push([p[i], p[i + 1], p[i + 2], p[i + 3]]);
    return s; };
  const side = (ax, ay, bx, by, cx, cy) => Math.sign((bx - ax) * (cy - ay) - (by - ay) * (cx - ax));
  const cross = ([a, b, c, d], [e, f, g, h]) => side(a, b, c, d, e, f) * side(a, b, c, d, g, h) < 0
    && side(e, f, g, h, a, b) * side(e, f, g, h, c, d) < 0;
  let n = 0;
  for (let i = 0; i < edges.length; i++) for (let j = i + 1; j < edges.length; j++) {
    const [x, y] = [edges[i], edges[j]];
    if (x.from === y.from || x.to === y.to || x.to === y.from || x.from === y.to) continue;
    if (segments(x.points).some((s) => segments(y.points).some((t) => cross(s, t)))) n++;
  }
  return n;
}"""
"""How many pairs of edges of the plan's graph cross (those sharing a step aside)."""

FANOUT = ROOT / "examples" / "fanout"
FANOUT_GOAL = "Add up the squares of 1 to 12, and check the sum with a closed-formula program."
"""The goal ``examples/fanout/run.py`` submits."""


async def test_the_dashboard_follows_the_fanout_example_to_its_answer(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    async with _fanout(nats_url, prefix, tmp_path, _fanout_scenario()) as (served, browser):
        page = await browser.new_page(viewport={"width": 1600, "height": 1000})
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
        # Fifteen edges, into 14, 15 and 16, none drawn over another: one can tell which
        # steps feed 14 (2 to 13) and which 15 (1).
        edges = await page.eval_on_selector_all(
            "#dag path.edge",
            "(es) => es.map((e) => [e.dataset.from, e.dataset.to, e.getAttribute('d')])")
        assert sorted((int(a), int(b)) for a, b, _ in edges) == sorted(
            [(n, 14) for n in range(2, 14)] + [(1, 15), (14, 16), (15, 16)])
        assert len({d for _, _, d in edges}) == 15
        boxes = await page.eval_on_selector_all("#dag g.node", "(ns) => ns.map((n) => "
                                                "n.getAttribute('transform'))")
        assert len(set(boxes)) == 16  # no two steps in the same place
        assert await page.evaluate(CROSSINGS) == 0  # the edge 1 -> 15 does not cross the 12
        assert (await page.text_content("#outcome") or "").startswith(
            "answer: The squares of 1..12 add up to 650")
        # The reviewed step: rejected (its program did not run), redone, approved: two
        # attempts and two critic reviews, each its own segment, the causes on hover.
        first = '.row[data-step="1"] .seg'
        assert [await a.get_attribute("data-state") for a in await page.query_selector_all(
            f"{first}[data-attempt]")] == ["rejected", "done"]
        assert "refused by the critic" in (await page.get_attribute(
            f'{first}[data-attempt="1"]', "title") or "")
        assert [await r.get_attribute("data-verdict") for r in await page.query_selector_all(
            f"{first}[data-review]")] == ["rejected", "approved"]
        assert await page.text_content('.row[data-step="1"] .badge') \
            == "2 attempts · critic: rejected, approved"
        # The planner's and the synthesizer's rows.
        assert await page.query_selector('.phase-row[data-phase="planner"] .seg.planning')
        assert await page.query_selector('.phase-row[data-phase="synthesis"] .seg.synthesis')
        assert "model calls" in (await page.text_content("#usage") or "")
        assert "$" not in (await page.text_content("#usage") or "")  # no prices set
        # A node opens its step's panel, in view.
        await page.click('#dag g.node[data-step="14"]')
        await page.wait_for_selector('#detail-title:text("step 14")')
        assert await _in_view(page, "#detail-title")
        assert "python(" in (await page.text_content("#panel pre.call") or "")
        await page.click('.row[data-step="16"]')
        await page.wait_for_selector('#detail-title:text("step 16")')
        assert await _in_view(page, "#detail-title")
        assert (await page.text_content("#detail") or "").strip() == "650"
        await page.click('.row[data-step="1"]')
        assert "rejected" in (await page.text_content("#panel") or "")
        await page.screenshot(path=tmp_path / "fanout-panel.png", full_page=False)
        await page.check("#failed-only")
        await page.wait_for_selector(".row", state="detached")
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
        await page.wait_for_selector('.row[data-step="1"]', state="detached")
        assert [await r.get_attribute("data-step")
                for r in await page.query_selector_all(".row")] == ["13"]
        await page.click('.row[data-step="13"]')
        await page.wait_for_selector('#detail-title:text("step 13")')
        assert "division by zero" in (await page.text_content("#detail") or "")
        await page.screenshot(path=tmp_path / "fanout-failed-only.png", full_page=True)


HIERARCHY = ROOT / "examples" / "hierarchy"


async def test_a_hierarchical_run_is_a_tree_walked_parent_to_child_and_back(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """The hierarchy example: the manager's step 1 starts the research desk's run, which
    replans by itself. The parent's step links to its sub-run, the sub-run back to the
    parent's step, and the run list nests the sub-runs under their parent."""
    scenario = parse_scenario((HIERARCHY / "scenario.toml").read_text(),
                              source="examples/hierarchy/scenario.toml")
    async with open_scripted_model_server(scenario) as model:
        data = tomllib.loads((HIERARCHY / "team.toml").read_text())
        data["models"]["scripted"]["base_url"] = model.base_url
        team = team_from_dict(data, source="examples/hierarchy/team.toml")
        settings = Settings(nats_url=nats_url, prefix=prefix)
        async with open_deployment(settings, team, builtin_tools(plugins=False)), \
                serving_gateway(nats_url, prefix, tmp_path) as served, \
                playwright.async_playwright() as p:
            browser = await _launch(p)
            page = await browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            run_id = await _post_run(served, {"goal": "How many hours has a leap year?"})
            await page.goto(f"{served.url}/?token={served.token}#{run_id}")
            # Live: the step's link to its sub-run shows while the step runs.
            link = '.row[data-step="1"] a.child-link'
            await page.wait_for_selector(link, timeout=60_000)
            child = (await page.get_attribute(link, "href") or "").lstrip("#")
            await page.wait_for_selector("#outcome.finished", timeout=90_000)
            await page.click('.row[data-step="1"]')
            await page.click("#panel a.child-link")
            await page.wait_for_function(f"location.hash === '#{child}'")
            back = f'#parent a[href="#{run_id}/1"]'
            await page.wait_for_selector(back)
            await page.wait_for_selector("#outcome.finished", timeout=60_000)
            assert await page.query_selector(".tl-overlay .replan")  # the desk replanned
            assert await page.query_selector(  # after the replan's step, past the failed one
                '.phase-row[data-phase="synthesis"] .seg.synthesis')
            await page.screenshot(path=tmp_path / "hierarchy-child.png", full_page=True)
            await page.click(back)
            await page.wait_for_selector('#detail-title:text("step 1")')
            assert (await page.text_content("#title")) == run_id
            # The list: each sub-run right under its parent, indented.
            await page.goto(f"{served.url}/")
            await page.wait_for_selector(f'tr[data-run="{child}"][data-parent="{run_id}"]')
            order = await page.eval_on_selector_all("tr[data-run]", "(rs) => rs.map((r) => "
                                                    "[r.dataset.run, r.dataset.parent])")
            runs = [r for r, _ in order]
            assert runs.index(run_id) < runs.index(child)
            assert {r for r, parent in order if parent == run_id} == \
                set(runs[runs.index(run_id) + 1:runs.index(run_id) + 3])
            await page.screenshot(path=tmp_path / "hierarchy-list.png", full_page=True)
            await browser.close()
    assert errors == [], errors


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


async def _in_view(page: Any, selector: str) -> bool:
    return bool(await page.eval_on_selector(selector, "(e) => { const r = "
                                            "e.getBoundingClientRect(); return r.top >= 0 && "
                                            "r.bottom <= innerHeight; }"))


async def _post_run(served: Gateway, body: dict[str, Any]) -> str:
    async with served.client() as client:
        response = await client.post("/runs", json=body)
    assert response.status_code == 202, response.text
    return str(response.json()["run_id"])


async def _launch(p: Any) -> Any:
    return await p.chromium.launch(executable_path=CHROMIUM, args=[
        "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run"])
