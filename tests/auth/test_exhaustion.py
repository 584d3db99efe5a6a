"""No role can exhaust what the others need, tried from one executor role's credentials.

A process holding the ``worker`` role's NATS user (``plancast auth init``) fills what it
may write: junk on the result subject of a run that does not exist, a flood on its own
error subject, offload envelopes naming an object far larger than it may send. Later runs
still finish, a live run's events are all still there, and the planner fetches nothing
it was not allowed. And a results stream that is full all the same (a backlog, here
filled by the admin) fails the runs waiting on it with a cause naming the limit, never a
hang, and the deployment serves runs again once room is back.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from nats.js import api
from nats.js.errors import APIError

from protocols import (
    ObjectRef,
    Offloaded,
    RunFailed,
    RunFinished,
    RunRequest,
    RunStarted,
    Step,
    StepStarted,
    Stream,
    Verb,
    encode,
    object_space,
    stream_name,
    subject,
)
from runtime.bus import Bus, open_bus
from runtime.client import follow, submit
from runtime.config import TeamConfig
from runtime.testing import Scenario, open_scripted_model_server
from runtime.tools import FunctionTool, ToolRegistry, builtin_tools
from runtime.worker import open_deployment

from ..actors.harness import finish, make_team
from ..secured import Secured, secured_server

pytestmark = pytest.mark.anyio

ROLES = ["planner", "worker", "synthesizer"]
STREAM_BYTES = 8 << 20
"""Every stream's ``max_bytes`` here (``PLANCAST_MAX_STREAM_BYTES``): 300 MB scaled down."""
ALLOWED = 1 << 20
"""What the worker role may send by reference (its ``max_object_bytes``)."""
HUGE = 6 << 20
"""The object its envelopes name (the object store holds `STREAM_BYTES` too)."""


class HoldArgs(msgspec.Struct, frozen=True):
    name: str


class Held:
    """A ``hold`` tool: its step runs until the test lets it go (a live run)."""

    def __init__(self) -> None:
        self.released = anyio.Event()

    async def hold(self, args: HoldArgs) -> str:
        await self.released.wait()
        return f"{args.name} held"

    def tools(self) -> ToolRegistry:
        tools = builtin_tools(plugins=False)
        tools.add(FunctionTool(self.hold, name="hold", description="waits for the test",
                               args_type=HoldArgs))
        return tools


def team(base_url: str, **policy: Any) -> TeamConfig:
    worker = {"description": "runs tools", "tools": ["echo", "hold"], "tool_steps_only": True,
              "concurrency": 4, "max_object_bytes": ALLOWED}
    return make_team(base_url, {"worker": worker}, **policy)


@asynccontextmanager
async def deployment(tmp_path: Path, prefix: str, monkeypatch: pytest.MonkeyPatch,
                     **policy: Any) -> AsyncIterator[tuple[Secured, Held]]:
    """A server with a user per role, every stream ``STREAM_BYTES`` large, the team served."""
    monkeypatch.setenv("PLANCAST_MAX_STREAM_BYTES", str(STREAM_BYTES))
    held = Held()
    async with open_scripted_model_server(Scenario(rules=[finish("done")])) as model, \
            secured_server(tmp_path, prefix, team(model.base_url, **policy)) as secured, \
            AsyncExitStack() as stack:
        for role in ROLES:
            await stack.enter_async_context(open_deployment(
                secured.settings(role), secured.team, held.tools(), roles=[role]))
        yield secured, held


def plan(tool: str, **args: str) -> list[Step]:
    return [Step(id=1, role="worker", tool=tool, args=args)]


async def run_to_end(client: Bus, steps: list[Step], timeout: float = 30) -> list[Any]:
    accepted = await submit(client, RunRequest(goal="work", plan=steps))
    with anyio.fail_after(timeout):
        return [e async for e in follow(client, accepted.run_id)]


async def started(client: Bus, steps: list[Step]) -> str:
    """A run whose step has started (and holds): its id."""
    accepted = await submit(client, RunRequest(goal="live", plan=steps))
    with anyio.fail_after(30):
        async for event in follow(client, accepted.run_id):
            if isinstance(event, StepStarted):
                return accepted.run_id
    raise AssertionError("the run ended before its step started")


async def as_worker(secured: Secured) -> Any:
    """The attacker: a raw JetStream context over the worker role's user."""
    errors: list[str] = []
    nc = await secured.connect("worker", errors, anyio.Event())
    return nc, nc.jetstream()


async def fill(js: Any, subj: str, total: int, sizes: Sequence[int] = (100_000,)) -> None:
    """Publish ``total`` bytes of junk on ``subj`` in messages of each size in turn, each
    until refused (the stream is full): smaller ones last fill it to the last bytes."""
    for size in sizes:
        for _ in range(total // size):
            try:
                await js.publish(subj, b"j" * size)
            except APIError:
                break
        total = 2 * size  # at most what a refusal at this size leaves


TO_THE_BYTE = (100_000, 1_000, 50)
"""Junk sizes that leave a full stream no room even for a claim."""


async def test_junk_on_an_unknown_runs_result_subject_does_not_stop_later_runs(
    tmp_path: Path, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with deployment(tmp_path, prefix, monkeypatch) as (secured, _):
        nc, js = await as_worker(secured)
        junk = subject(prefix, Verb.RESULT, "run-nosuchrun000", "worker")
        await fill(js, junk, 2 * STREAM_BYTES, TO_THE_BYTE)
        await nc.close()
        async with open_bus(secured.settings("client")) as client:
            events = [await run_to_end(client, plan("echo", text=f"run {n}")) for n in (1, 2)]
        async with open_bus(secured.settings("admin")) as admin:
            kept = await admin.js.stream_info(stream_name(prefix, Stream.RESULTS))
    assert [type(e[-1]) for e in events] == [RunFinished, RunFinished]
    assert kept.state.bytes < 100_000  # the server never kept the junk


async def test_a_flood_on_a_roles_error_subject_evicts_no_live_runs_events(
    tmp_path: Path, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with deployment(tmp_path, prefix, monkeypatch) as (secured, held):
        async with open_bus(secured.settings("client")) as client:
            run_id = await started(client, plan("hold", name="a"))
            nc, js = await as_worker(secured)
            await fill(js, subject(prefix, Verb.ERROR, "worker"), 3 * STREAM_BYTES, [60_000])
            await nc.close()
            held.released.set()
            with anyio.fail_after(30):  # a follower from event 1, after the flood
                events = [e async for e in follow(client, run_id)]
    assert isinstance(events[0], RunStarted) and events[0].seq == 1
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert isinstance(events[-1], RunFinished)


def bytes_sent_to(secured: Secured, user: str) -> int:
    """What the server sent the connections of ``user`` so far (its monitoring endpoint)."""
    with urllib.request.urlopen(f"{secured.server.monitor_url}/connz?auth=true&limit=4096",
                                timeout=5) as page:
        connz = json.load(page)
    return sum(c["out_bytes"] for c in connz["connections"]
               if c.get("authorized_user") == user)


async def test_envelopes_naming_objects_larger_than_the_sender_may_send_are_not_fetched(
    tmp_path: Path, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with deployment(tmp_path, prefix, monkeypatch) as (secured, held):
        async with open_bus(secured.settings("client")) as client, \
                open_bus(secured.settings("worker")) as worker, \
                open_bus(secured.settings("admin")) as admin:
            run_id = await started(client, plan("hold", name="a"))
            results = subject(prefix, Verb.RESULT, run_id, "worker")  # the worker's own space
            honest = await worker.put_object(object_space(prefix, results), b"h" * HUGE)
            envelopes: Sequence[ObjectRef] = [
                *[msgspec.structs.replace(honest, sha256="0" * 64)] * 5,  # its true size
                *[msgspec.structs.replace(honest, size=1000)] * 5,  # a size it does not have
            ]
            reports = await admin.nc.subscribe(subject(prefix, Verb.ERROR, "planner"))
            before = bytes_sent_to(secured, "planner")
            for ref in envelopes:
                await worker.js.publish(results,
                                        encode(Offloaded(inner_type="step.result", ref=ref)))
            refused = []
            with anyio.fail_after(60):
                async for report in reports.messages:
                    refused.append(json.loads(report.data)["reason"])
                    if len(refused) == len(envelopes):
                        break
            fetched = bytes_sent_to(secured, "planner") - before
            held.released.set()
            with anyio.fail_after(30):
                events = [e async for e in follow(client, run_id)]
    assert all("offloaded message" in reason for reason in refused), refused
    assert fetched < ALLOWED, f"the planner fetched {fetched} bytes"
    assert isinstance(events[-1], RunFinished)


async def test_a_full_results_stream_fails_the_runs_waiting_on_it_naming_the_limit(
    tmp_path: Path, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with deployment(tmp_path, prefix, monkeypatch,
                          timeouts={"storage": 1.0}) as (secured, _):
        results = stream_name(prefix, Stream.RESULTS)
        backlog = subject(prefix, Verb.RESULT, "backlog", "admin")
        async with open_bus(secured.settings("admin")) as admin, \
                open_bus(secured.settings("client")) as client:
            await admin.js.add_consumer(results, api.ConsumerConfig(
                durable_name="backlog", filter_subject=backlog,
                ack_policy=api.AckPolicy.EXPLICIT))
            await fill(admin.js, backlog, 2 * STREAM_BYTES, TO_THE_BYTE)
            stuck = await run_to_end(client, plan("echo", text="no room"))
            await admin.js.delete_consumer(results, "backlog")
            await admin.js.purge_stream(results, subject=backlog)
            served = await run_to_end(client, plan("echo", text="room again"))
    failed = stuck[-1]
    assert isinstance(failed, RunFailed) and failed.cause == "storage", stuck
    assert results in failed.reason and "PLANCAST_MAX_STREAM_BYTES" in failed.reason
    assert isinstance(served[-1], RunFinished)
