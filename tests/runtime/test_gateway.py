"""``plancast serve`` as a client would use it: a real process, real HTTP, real SSE."""

from __future__ import annotations

import getpass
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from protocols import PlanApproved, PlanAwaitingApproval, RunFinished, encode
from runtime.bus import free_port
from runtime.client import follow
from runtime.config import Settings
from runtime.gateway import TOKEN_FILE
from runtime.testing import Scenario, open_scripted_model_server
from runtime.tools import builtin_tools
from runtime.worker import open_deployment

from ..actors.harness import make_team
from ..subprocesses import PLANCAST, clean_env
from .test_cli import RULES

pytestmark = pytest.mark.anyio


@dataclass(frozen=True)
class Gateway:
    """A running ``plancast serve``: its base URL and the token it made."""

    url: str
    token: str
    data_dir: Path

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def client(self, **options: Any) -> httpx2.AsyncClient:
        """An HTTP client that holds the token."""
        return httpx2.AsyncClient(base_url=self.url, headers=self.auth, timeout=30, **options)


@asynccontextmanager
async def serving_gateway(nats_url: str, prefix: str, cwd: Path,
                          *args: str, **env: str) -> AsyncIterator[Gateway]:
    """``plancast serve`` in a process of its own, its data directory in ``cwd``; yields it
    once it listens."""
    port = free_port()
    data_dir = cwd / "gateway-data"
    server = await anyio.open_process(
        [PLANCAST, "serve", "--port", str(port), "--nats", nats_url, "--prefix", prefix,
         *args], cwd=cwd, env=clean_env(PLANCAST_DATA_DIR=str(data_dir), **env))
    try:
        with anyio.fail_after(30):
            while not _listening(port):  # noqa: ASYNC110 - another process
                await anyio.sleep(0.1)
        token = env.get("PLANCAST_GATEWAY_TOKEN") or (data_dir / TOKEN_FILE).read_text().strip()
        yield Gateway(f"http://127.0.0.1:{port}", token, data_dir)
    finally:
        server.terminate()
        with anyio.fail_after(30):
            await server.wait()


async def sse(response: httpx2.Response) -> AsyncIterator[dict[str, str]]:
    """Each event of a text/event-stream as its fields (comments, such as pings, skipped)."""
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if not line:
            if fields:
                yield fields
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")


async def events_of(client: httpx2.AsyncClient, run_id: str,
                    headers: dict[str, str] | None = None) -> list[dict[str, str]]:
    async with client.stream("GET", f"/runs/{run_id}/events", headers=headers) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return [event async for event in sse(response)]


async def test_a_client_submits_follows_resumes_and_reads_a_run_over_http(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    async with open_scripted_model_server(Scenario(rules=RULES)) as model:
        settings = Settings(nats_url=nats_url, prefix=prefix)
        async with open_deployment(settings, make_team(model.base_url),
                                   builtin_tools(plugins=False)) as bus, \
                serving_gateway(nats_url, prefix, tmp_path) as served, \
                served.client() as client:
            found = await _exercise(client, bus)
    events, resumed, wire = found
    assert [e["id"] for e in events] == [str(n) for n in range(1, len(wire) + 1)]
    assert [json.loads(e["data"]) for e in events] == wire  # as on the wire
    assert [e["id"] for e in resumed] == [e["id"] for e in events[3:]]  # no gap, no repeat
    assert wire[-1]["type"] == "event.run.finished"


async def _exercise(client: httpx2.AsyncClient, bus: Any) -> tuple[Any, Any, Any]:
    """Everything a client does, with the checks that need the server up."""
    bad = await client.post("/runs", content=b'{"goal": ""}',
                            headers={"Content-Type": "application/json"})
    assert bad.status_code == 422 and "goal" in bad.json()["error"]
    accepted = await client.post("/runs", json={"goal": "greet the world"})
    assert accepted.status_code == 202, accepted.text
    run_id = accepted.json()["run_id"]
    events = await events_of(client, run_id)
    resumed = await events_of(client, run_id, {"Last-Event-ID": "3"})
    wire = [json.loads(encode(e)) async for e in follow(bus, run_id)]
    run = (await client.get(f"/runs/{run_id}")).json()
    assert run["status"] == "finished" and run["outcome"] == "hello, world"
    listed = (await client.get("/runs")).json()
    assert [r["run_id"] for r in listed] == [run_id]
    assert (await client.get("/runs/run-000000000000")).status_code == 404
    assert (await client.get("/runs/not.a*token/events")).status_code == 404
    spec = (await client.get("/openapi.json")).json()
    assert {"/runs", "/runs/{run_id}", "/runs/{run_id}/events"} <= spec["paths"].keys()
    assert "RunRequest" in spec["components"]["schemas"]
    return events, resumed, wire


async def test_a_plan_awaiting_approval_is_read_and_approved_over_http(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    async with open_scripted_model_server(Scenario(rules=RULES)) as model:
        settings = Settings(nats_url=nats_url, prefix=prefix)
        async with open_deployment(settings, make_team(model.base_url),
                                   builtin_tools(plugins=False)) as bus, \
                serving_gateway(nats_url, prefix, tmp_path) as served, \
                served.client() as client:
            accepted = await client.post("/runs", json={"goal": "greet the world",
                                                        "review_plan": "human"})
            run_id = accepted.json()["run_id"]
            async for event in follow(bus, run_id):
                if isinstance(event, PlanAwaitingApproval):
                    break
            shown = await client.get(f"/runs/{run_id}/plan")
            bad = await client.post(f"/runs/{run_id}/plan", json={"approve": True})
            decided = await client.post(f"/runs/{run_id}/plan", json={"approved": True})
            events = [e async for e in follow(bus, run_id)]
            after = await client.get(f"/runs/{run_id}/plan")
            spec = (await client.get("/openapi.json")).json()
    assert shown.status_code == 200 and shown.json()["type"] == "event.plan.awaiting_approval"
    assert [s["id"] for s in shown.json()["steps"]] == [1, 2]
    assert bad.status_code == 422
    assert decided.status_code == 200 and decided.json()["digest"] == shown.json()["digest"]
    assert decided.json()["outcome"] == "approved"
    by = f"{getpass.getuser()} (gateway)"  # the user serving it: its token is theirs
    assert [e.by for e in events if isinstance(e, PlanApproved)] == [by]
    assert isinstance(events[-1], RunFinished)
    assert after.status_code == 404 and "awaits approval" in after.json()["error"]
    assert "/runs/{run_id}/plan" in spec["paths"]


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0
