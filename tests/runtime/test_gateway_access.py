"""``plancast serve`` is not a door: from a web page of another origin (Debian's Chromium on
a page another local server serves), from a local process without the token, and from a
client holding it that asks for less review than the team requires."""

from __future__ import annotations

import getpass
import os
import secrets
import shutil
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import msgspec
import pytest

from protocols import PlanApproved, PlanAwaitingApproval, RunFinished, Step
from runtime.bus import Bus, free_port
from runtime.client import collect_runs, follow
from runtime.config import Settings
from runtime.gateway import TOKEN_FILE
from runtime.testing import Scenario, open_scripted_model_server
from runtime.tools import builtin_tools
from runtime.worker import open_deployment

from ..actors.harness import make_team
from ..needs import CHROMIUM as CHROMIUM_NEEDED
from ..subprocesses import PYTHON, clean_env, plancast, stderr_tail
from .test_cli import RULES
from .test_gateway import Gateway, _listening, serving_gateway

pytestmark = pytest.mark.anyio

CHROMIUM = shutil.which("chromium")
needs_chromium = CHROMIUM_NEEDED

EVIL_PLAN = msgspec.json.encode([Step(id=1, role="worker", tool="python",
                                      args={"code": "print('a page ran this')"})]).decode()
"""What a page wants run: a ``python`` step of its own (no model decides on it)."""

ATTACKER_PAGE = """<!doctype html><title>cats</title>
<iframe name="sink"></iframe>
<script>
// Requests a browser sends without asking the gateway first (no CORS preflight).
async function postText(url, body) {
  await fetch(url, {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"},
                    body: JSON.stringify(body)});
}
function postForm(url, name, value, enctype) {
  return new Promise((resolve) => {
    const form = Object.assign(document.createElement("form"),
                               {method: "POST", action: url, target: "sink", enctype});
    form.append(Object.assign(document.createElement("input"), {name, value}));
    document.body.append(form);
    document.querySelector("iframe").onload = () => resolve();
    form.submit();
  });
}
</script>
"""


def _token() -> str:
    return secrets.token_urlsafe(24)


@asynccontextmanager
async def _deployment_and_gateway(nats_url: str, prefix: str, tmp_path: Path,
                                  **policy: Any) -> AsyncIterator[tuple[Bus, Gateway]]:
    """A team (its worker runs ``python`` steps) and ``plancast serve`` in front of it,
    with a token given in its environment."""
    async with open_scripted_model_server(Scenario(rules=RULES)) as model:
        settings = Settings(nats_url=nats_url, prefix=prefix)
        async with open_deployment(settings, make_team(model.base_url, **policy),
                                   builtin_tools(plugins=False)) as bus, \
                serving_gateway(nats_url, prefix, tmp_path,
                                PLANCAST_GATEWAY_TOKEN=_token()) as served:
            yield bus, served


@asynccontextmanager
async def _attacker_site(tmp_path: Path) -> AsyncIterator[str]:
    """Another web server on this machine (another port: another origin), serving the
    attacker's page; yields the page's URL."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "cats.html").write_text(ATTACKER_PAGE)
    port = free_port()
    server = await anyio.open_process(
        [PYTHON, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory",
         str(site)], env=clean_env())
    try:
        with anyio.fail_after(30):
            while not _listening(port):  # noqa: ASYNC110 - another process
                await anyio.sleep(0.1)
        yield f"http://localhost:{port}/cats.html"
    finally:
        server.terminate()
        with anyio.fail_after(30):
            await server.wait()


@needs_chromium
async def test_a_page_of_another_origin_can_neither_submit_nor_approve_a_run(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """The user's run waits for their approval; a page they opened posts a run with a
    ``python`` step (as text/plain JSON, and as a form), and an approval of the held plan.
    Each is refused before any of it is read, no run starts, the plan still waits, and the
    user's own approval is the one that counts."""
    playwright = pytest.importorskip("playwright.async_api")
    async with _deployment_and_gateway(nats_url, prefix, tmp_path) as (bus, served), \
            served.client() as user, _attacker_site(tmp_path) as cats, \
            playwright.async_playwright() as p:
        accepted = await user.post("/runs", json={"goal": "greet the world",
                                                  "review_plan": "human"})
        run_id = accepted.json()["run_id"]
        async for event in follow(bus, run_id):
            if isinstance(event, PlanAwaitingApproval):
                break
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--no-first-run"])
        page = await browser.new_page()
        await page.goto(cats)
        runs, plan = f"{served.url}/runs", f"{served.url}/runs/{run_id}/plan"
        form = "([url, name]) => postForm(url, name, '\"}', 'text/plain')"
        attempts = [
            (runs, "([url, body]) => postText(url, body)",
             {"goal": "show me a cat", "plan": msgspec.json.decode(EVIL_PLAN)}),
            (runs, form, '{"goal": "show me a cat", "plan": ' + EVIL_PLAN + ', "pad": "'),
            (plan, "([url, body]) => postText(url, body)", {"approved": True, "by": "page"}),
            (plan, form, '{"approved": true, "by": "page", "pad": "'),
        ]
        statuses = []
        for url, call, argument in attempts:  # each awaited until its answer came
            async with page.expect_response(lambda r, url=url: r.url == url) as response:
                await page.evaluate(call, [url, argument])
            statuses.append((await response.value).status)
        await browser.close()
        listed = await collect_runs(bus, active_only=False, limit=10)
        still = await user.get(f"/runs/{run_id}/plan")
        decided = await user.post(f"/runs/{run_id}/plan", json={"approved": True})
        events = [e async for e in follow(bus, run_id)]
    assert statuses == [403, 403, 403, 403]
    assert [r.run_id for r in listed] == [run_id]  # the page's runs never started
    assert still.status_code == 200 and still.json()["type"] == "event.plan.awaiting_approval"
    assert decided.status_code == 200
    assert [e.by for e in events if isinstance(e, PlanApproved)] == [
        f"{getpass.getuser()} (gateway)"]
    assert isinstance(events[-1], RunFinished)


@needs_chromium
async def test_a_name_rebound_to_the_gateways_address_gets_nothing(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """DNS rebinding: a name the attacker controls resolves to 127.0.0.1 (Chromium is told
    so), so its pages are the gateway's own origin to the browser. The gateway answers no
    such Host, not even its dashboard page."""
    playwright = pytest.importorskip("playwright.async_api")
    async with _deployment_and_gateway(nats_url, prefix, tmp_path) as (_, served), \
            playwright.async_playwright() as p:
        port = served.url.rsplit(":", 1)[1]
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--host-resolver-rules=MAP cats.example 127.0.0.1"])
        page = await browser.new_page()
        response = await page.goto(f"http://cats.example:{port}/")
        assert response is not None
        status = response.status
        posted = await page.evaluate("""async () => (await fetch("/runs", {method: "POST",
            headers: {"Content-Type": "text/plain"}, body: '{"goal": "rebound"}'})).status""")
        await browser.close()
    assert (status, posted) == (400, 400)


async def test_a_local_process_without_the_token_is_refused(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """Every request but the dashboard page and the schema needs the token; with it, a
    change must say it is JSON, name a Host the gateway answers to, and come from no
    foreign Origin. Nothing refused starts a run."""
    async with _deployment_and_gateway(nats_url, prefix, tmp_path) as (bus, served), \
            httpx2.AsyncClient(base_url=served.url, timeout=30) as stranger, \
            served.client() as user:
        run = {"goal": "greet the world"}
        other = "y" if served.token.endswith("x") else "x"
        wrong = {"Authorization": f"Bearer {served.token[:-1]}{other}"}
        refused = {
            "no token": await stranger.post("/runs", json=run),
            "wrong token": await stranger.post("/runs", json=run, headers=wrong),
            "token as basic": await stranger.post("/runs", json=run, headers={
                "Authorization": f"Basic {served.token}"}),
            "list": await stranger.get("/runs"),
            "run": await stranger.get("/runs/run-000000000000"),
            "events": await stranger.get("/runs/run-000000000000/events"),
            "plan": await stranger.get("/runs/run-000000000000/plan"),
            "decide": await stranger.post("/runs/run-000000000000/plan",
                                          json={"approved": True}),
        }
        typed = {kind: await user.post("/runs", content=b'{"goal": "typed"}',
                                       headers={"Content-Type": kind} if kind else {})
                 for kind in ("text/plain", "application/x-www-form-urlencoded",
                              "multipart/form-data; boundary=x", "")}
        foreign = await user.post("/runs", json=run, headers={"Origin": "http://localhost:1"})
        null = await user.post("/runs", json=run, headers={"Origin": "null"})
        rebound = await user.post("/runs", json=run, headers={"Host": "cats.example"})
        public = [await stranger.get("/"), await stranger.get("/openapi.json")]
        listed_before = await collect_runs(bus, active_only=False, limit=10)
        own_origin = await user.post("/runs", content=b'{"goal": "greet the world"}',
                                     headers={"Content-Type": "application/json; charset=utf-8",
                                              "Origin": served.url})
        by_name = await user.get("/runs", headers={"Host": served.url.replace(
            "http://127.0.0.1", "localhost")})
    assert {k: r.status_code for k, r in refused.items()} == dict.fromkeys(refused, 401)
    assert refused["no token"].headers["www-authenticate"].startswith("Bearer")
    assert "Authorization: Bearer <token>" in refused["no token"].json()["error"]
    assert {k: r.status_code for k, r in typed.items()} == dict.fromkeys(typed, 415)
    assert "application/json" in typed["text/plain"].json()["error"]
    assert (foreign.status_code, null.status_code, rebound.status_code) == (403, 403, 400)
    assert [r.status_code for r in public] == [200, 200]
    assert listed_before == []
    assert own_origin.status_code == 202, own_origin.text
    assert by_name.status_code == 200 and len(by_name.json()) == 1


async def test_a_request_cannot_drop_the_review_the_team_requires(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """With ``review_plan = "human"`` in the team file, a request holding the token that
    asks for no review, or the critic's, is refused with the reason; one that says nothing
    waits for a person's approval."""
    async with _deployment_and_gateway(nats_url, prefix, tmp_path,
                                       review_plan="human") as (bus, served), \
            served.client() as user:
        off = await user.post("/runs", json={"goal": "greet the world", "review_plan": "off"})
        auto = await user.post("/runs", json={"goal": "greet the world", "review_plan": "auto"})
        plain = await user.post("/runs", json={"goal": "greet the world"})
        async for event in follow(bus, plain.json()["run_id"]):
            if isinstance(event, PlanAwaitingApproval):
                break
        listed = await collect_runs(bus, active_only=False, limit=10)
    for refused in (off, auto):
        assert refused.status_code == 422, refused.text
        assert "review_plan = 'human' in its team file" in refused.json()["error"]
        assert "leave review_plan out" in refused.json()["error"]
    assert event.reviewer == "human"
    assert [r.run_id for r in listed] == [plain.json()["run_id"]]


async def test_serve_keeps_its_token_for_its_owner_only(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """The token is made once, in a file only its owner reads, and kept across restarts; a
    token file others can read is refused (a new one is made once it is removed), and
    PLANCAST_GATEWAY_TOKEN wins over the file."""
    async with serving_gateway(nats_url, prefix, tmp_path) as first:
        pass
    token_file = first.data_dir / TOKEN_FILE
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert len(first.token) >= 32
    async with serving_gateway(nats_url, prefix, tmp_path) as second, second.client() as c:
        assert second.token == first.token
        assert (await c.get("/runs")).status_code == 200
    given = _token()
    async with serving_gateway(nats_url, prefix, tmp_path,
                               PLANCAST_GATEWAY_TOKEN=given) as third, \
            httpx2.AsyncClient(base_url=third.url) as c:
        assert (await c.get("/runs", headers={"Authorization": f"Bearer {given}"})
                ).status_code == 200
        assert (await c.get("/runs", headers=first.auth)).status_code == 401
    os.chmod(token_file, 0o644)
    env = clean_env(PLANCAST_DATA_DIR=str(first.data_dir))
    loose = await plancast("serve", "--port", str(free_port()), "--nats", nats_url,
                           "--prefix", prefix, cwd=tmp_path, env=env)
    assert loose.returncode == 2
    assert "readable by others (mode 644)" in stderr_tail(loose)
    short = await plancast("serve", "--nats", nats_url, "--prefix", prefix, cwd=tmp_path,
                           env={**env, "PLANCAST_GATEWAY_TOKEN": "1234"})
    assert short.returncode == 2 and "at least 16 characters" in stderr_tail(short)
