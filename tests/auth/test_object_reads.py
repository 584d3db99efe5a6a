"""Each role reads only its own offloaded data, from the position of a process holding one
executor role's credentials (``plancast auth init``) on a real server.

A run sends large payloads every way they go (a step's result, a task carrying it, the
synthesis task carrying every result); the run finishes with one user per role, and then
``other``, an executor role with no part in it, asks the server for every stored object
message by every read the JetStream API has: each is refused by the server. So are its
writes into other roles' objects, a rollup that would erase them all, stream information
(which lists run ids, keys and object names) and run-state reads.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import msgspec
import nats
import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.errors import APIError

from protocols import (
    Offloaded,
    RunFinished,
    RunRequest,
    StepFinished,
    Stream,
    objects_bucket,
    runs_bucket,
    stream_name,
)
from runtime.bus import offloaded, open_bus
from runtime.client import follow, step_output, submit
from runtime.testing import Rule, Scenario, open_scripted_model_server
from runtime.tools import FunctionTool, ToolRegistry, builtin_tools

from ..actors.harness import echo, finish, make_team, plan_line
from ..secured import Secured, secured_server

pytestmark = pytest.mark.anyio

SIZE = 600_000
"""Characters of step 1's output: its result, step 2's task and the synthesis task are all
larger than a message may be (512 KiB), so each travels by reference."""
ROLES = {
    "worker": {"description": "runs tools", "tools": ["echo", "big"], "tool_steps_only": True},
    "other": {"description": "another executor", "tools": ["echo"], "tool_steps_only": True},
}


class BigArgs(msgspec.Struct, frozen=True):
    size: int


async def big(args: BigArgs) -> str:
    return "x" * args.size


def big_tools() -> ToolRegistry:
    tools = builtin_tools(plugins=False)
    tools.add(FunctionTool(big, name="big", description="a large output", args_type=BigArgs))
    return tools


@pytest.fixture
async def secured(tmp_path: Path, prefix: str) -> AsyncIterator[Secured]:
    plan = [plan_line(1, tool="big", args={"size": SIZE}), echo(2, "$1")]
    async with open_scripted_model_server(Scenario(rules=[
            Rule(role="planner", lines=plan), finish("done")])) as model:
        async with secured_server(tmp_path, prefix, make_team(model.base_url, ROLES)) as s:
            yield s


class Asker:
    """A raw connection as one user that tells, for each request, whether the server
    answered it or refused to let it through (a permissions violation)."""

    def __init__(self, secured: Secured, user: str) -> None:
        self.secured, self.user = secured, user
        self.denied: list[str] = []
        self.replies: list[Msg] = []
        self.changed = anyio.Event()
        self.nc: NATS | None = None

    async def __aenter__(self) -> Asker:
        async def on_error(exc: Exception) -> None:
            if "permissions violation" in str(exc).lower():
                self.denied.append(str(exc).lower())
                self.changed.set()

        creds = self.secured.user(self.user)
        self.nc = await nats.connect(self.secured.server.url, user=creds["user"],
                                     password=creds["password"], error_cb=on_error,
                                     inbox_prefix=f"_INBOX_{self.user}",
                                     max_reconnect_attempts=0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.nc is not None
        await self.nc.close()

    async def answered(self, subject: str, body: bytes = b"") -> bool:
        """Send a request; True if the server answered, False if it refused it."""
        assert self.nc is not None
        self.replies = []

        async def got(msg: Msg) -> None:
            self.replies.append(msg)
            self.changed.set()

        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox, cb=got)
        try:
            await self.nc.publish(subject, body, reply=inbox)
            with anyio.fail_after(10):
                while not self.replies and not self.refused(subject):
                    await self.changed.wait()
                    self.changed = anyio.Event()
        finally:
            await sub.unsubscribe()
        return not self.refused(subject)

    def refused(self, subject: str) -> bool:
        return any(f'"{subject.lower()}"' in denial for denial in self.denied)


async def test_a_role_reads_no_other_roles_offloaded_tasks_results_or_synthesis(
    secured: Secured
) -> None:
    prefix, captured = secured.prefix, list[tuple[str, Offloaded]]()

    async def capture(msg: Msg) -> None:
        envelope = offloaded(msg.data)
        if envelope is not None:
            captured.append((msg.subject, envelope))

    async with open_bus(secured.settings("admin")) as admin:
        await admin.nc.subscribe(f"{prefix}.>", cb=capture)
        async with secured.serving(["planner", "worker", "synthesizer"], big_tools()), \
                open_bus(secured.settings("client")) as client:
            accepted = await submit(client, RunRequest(goal="big data"))
            with anyio.fail_after(60):
                events = [e async for e in follow(client, accepted.run_id)]
        # With one user per role, every large payload reached its reader.
        assert isinstance(events[-1], RunFinished) and events[-1].answer == "done", events
        second = [e for e in events if isinstance(e, StepFinished) and e.step_id == 2]
        assert second and second[0].output.startswith("x" * 1000)  # $1 reached it whole
        sent = {(subject.split(".")[1], envelope.inner_type) for subject, envelope in captured}
        assert {("step", "step.task"), ("synthesis", "synthesis.task")} <= sent, sent
        # (a step's large output goes by ``output_ref``, kept once for its result and its
        # record of the finished attempt: the result itself is small)

        stream = f"OBJ_{objects_bucket(prefix)}"
        info = await admin.js.stream_info(stream, subjects_filter=">")
        stored = sorted(info.state.subjects or {})
        assert info.state.messages >= 3 and stored
        assert any(".C.result." in s for s in stored), stored  # step 1's output
        async with Asker(secured, "other") as other:
            read = []
            for seq in range(info.state.first_seq, info.state.last_seq + 1):
                body = json.dumps({"seq": seq}).encode()
                for api in (f"$JS.API.STREAM.MSG.GET.{stream}", f"$JS.API.DIRECT.GET.{stream}"):
                    if await other.answered(api, body):
                        read.append(f"{api} seq {seq}")
            for subject in stored:
                if await other.answered(f"$JS.API.DIRECT.GET.{stream}.{subject}"):
                    read.append(subject)
            assert not read, f"{len(read)} reads of other roles' objects answered: {read[:5]}"

            # Nor can it erase them: a rollup of the whole store, sent in its own space.
            assert other.nc is not None
            own = f"$O.{objects_bucket(prefix)}.C.result.{accepted.run_id}.other.k.0"
            with pytest.raises(APIError, match="rollup"):
                await other.nc.jetstream().publish(own, b"gone", headers={"Nats-Rollup": "all"})
        assert (await admin.js.stream_info(stream)).state.messages == info.state.messages
    assert "violation" in secured.server.log_tail(400).lower()


async def test_a_role_may_not_list_streams_keys_or_write_other_roles_objects(
    secured: Secured
) -> None:
    p, bucket = secured.prefix, objects_bucket(secured.prefix)
    streams = [*(stream_name(p, kind) for kind in Stream), f"KV_{runs_bucket(p)}",
               f"OBJ_{bucket}"]
    kv = f"KV_{runs_bucket(p)}"
    for user in ("other", "worker", "synthesizer"):
        async with Asker(secured, user) as asker:
            asks = [*(f"$JS.API.STREAM.INFO.{s}" for s in streams),
                    f"$JS.API.CONSUMER.CREATE.{kv}", f"$JS.API.STREAM.MSG.GET.{kv}",
                    f"$JS.API.DIRECT.GET.{kv}.$KV.{runs_bucket(p)}.runs.r1",
                    f"$O.{bucket}.C.step.worker.k.0", f"$O.{bucket}.C.synthesis.k.0",
                    f"$O.{bucket}.C.review.k.0", f"$O.{bucket}.C.event.r1.k.0",
                    f"$O.{bucket}.C.result.r1.planner.k.0", f"$O.{bucket}.C.state.r1.k.0",
                    f"$O.{bucket}.M.a2V5",
                    # wildcards in a direct get's subject reach no further than its rights
                    f"$JS.API.DIRECT.GET.OBJ_{bucket}.$O.{bucket}.C.>",
                    f"$JS.API.DIRECT.GET.OBJ_{bucket}.$O.{bucket}.C.*.{user}.>",
                    f"$JS.API.DIRECT.GET.OBJ_{bucket}.$O.{bucket}.C.result.*.*.>"]
            if user != "worker":
                asks.append(f"$O.{bucket}.C.result.r1.worker.k.0")
            answered = [a for a in asks if await asker.answered(a, b"{}")]
            assert not answered, (user, answered)
            # Its own tasks' objects it may read (the server answers: there are none).
            tasks = "synthesis" if user == "synthesizer" else f"step.{user}"
            assert await asker.answered(
                f"$JS.API.DIRECT.GET.OBJ_{bucket}.$O.{bucket}.C.{tasks}.k.0")


async def test_a_client_reads_a_long_step_output_the_run_state_points_to(
    secured: Secured
) -> None:
    """The run state a client reads points long outputs to the object store (``state.*``):
    the client (the gateway's user) may fetch them whole, as ``GET
    /runs/{id}/steps/{step_id}/output`` does; an executor may not."""
    async with secured.serving(["planner", "worker", "synthesizer"], big_tools()), \
            open_bus(secured.settings("client")) as client:
        accepted = await submit(client, RunRequest(goal="big data"))
        with anyio.fail_after(60):
            events = [e async for e in follow(client, accepted.run_id)]
        output = await step_output(client, accepted.run_id, 1)
    assert isinstance(events[-1], RunFinished), events
    assert output == "x" * SIZE
    bucket = objects_bucket(secured.prefix)
    async with Asker(secured, "other") as other:
        assert not await other.answered(
            f"$JS.API.DIRECT.GET.OBJ_{bucket}.$O.{bucket}.C.state.{accepted.run_id}.k.0")
