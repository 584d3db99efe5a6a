"""The Actor base against a real nats-server: bad input is refused loudly, work continues."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from protocols import (
    ActorError,
    Heartbeat,
    RunAccepted,
    RunRequest,
    Step,
    StepResult,
    StepTask,
    Stream,
    Verb,
    decode,
    encode,
    stream_name,
    subject,
)
from runtime.actor import Source, WorkQueue
from runtime.bus import Bus, open_bus
from runtime.config import Settings

from .echo_actor import EchoActor

pytestmark = pytest.mark.anyio


def task(goal: str, run_id: str = "r1", step_id: int = 1) -> StepTask:
    return StepTask(run_id=run_id, goal=goal, step=Step(id=step_id, role="echo", tool="echo"))


class Watch:
    """Collects messages from a core subscription; tests wait on what they expect."""

    def __init__(self, message_type: Any, bus: Bus | None = None) -> None:
        self.type = message_type
        self.bus = bus
        """Given, messages sent by reference (too large) are fetched, as actors do."""
        self.items: list[Any] = []
        self._changed = anyio.Event()

    async def cb(self, msg: Any) -> None:
        data = await self.bus.resolve(msg.data) if self.bus else msg.data
        self.items.append(decode(data, self.type))
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_for(self, count: int, timeout: float = 20.0) -> list[Any]:
        with anyio.fail_after(timeout):
            while len(self.items) < count:
                await self._changed.wait()
        return self.items


@asynccontextmanager
async def echo_deployment(
    nats_url: str, prefix: str, **overrides: Any
) -> AsyncIterator[tuple[Bus, Watch, Watch]]:
    settings = Settings(nats_url=nats_url, prefix=prefix, **overrides)
    async with open_bus(settings) as bus, anyio.create_task_group() as tg:
        errors, results = Watch(ActorError), Watch(StepResult, bus)
        await bus.nc.subscribe(subject(prefix, Verb.ERROR, "*", wildcard=True), cb=errors.cb)
        await bus.nc.subscribe(subject(prefix, Verb.RESULT, "*", wildcard=True), cb=results.cb)
        actor = EchoActor(bus)
        await tg.start(actor.serve)
        yield bus, errors, results
        actor.drain()


async def publish_raw(bus: Bus, data: bytes) -> None:
    await bus.js.publish(bus.subject(Verb.STEP, "echo"), data)


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"\x00\xffnot json{", "malformed message, not valid JSON"),
        (b"[1, 2, 3]", "a JSON list, not an object"),
        (encode(RunRequest(goal="wrong queue")), "type 'run.request'"),
        (b'{"type":"step.task","run_id":"r1","goal":"g"}', "missing required field `step`"),
        (
            b'{"type":"step.task","run_id":"bad id","goal":"g","step":{"id":1,"role":"echo"}}',
            "run_id",
        ),
    ],
    ids=["garbage", "not-an-object", "wrong-type", "missing-field", "bad-token"],
)
async def test_bad_input_is_an_error_event_and_a_dead_letter_and_the_actor_goes_on(
    nats_url: str, prefix: str, payload: bytes, reason: str
) -> None:
    async with echo_deployment(nats_url, prefix) as (bus, errors, results):
        await publish_raw(bus, payload)
        [error] = await errors.wait_for(1)
        assert reason in error.reason
        assert error.subject == bus.subject(Verb.STEP, "echo")
        assert error.role == "echo" and error.size == len(payload)
        assert error.dead_letter == bus.subject(Verb.DEAD, "echo")
        kept = await bus.js.get_last_msg(stream_name(prefix, Stream.DEAD), error.dead_letter)
        assert kept.data == payload
        assert kept.headers["Plancast-Subject"] == error.subject

        await bus.publish_durable(bus.subject(Verb.STEP, "echo"), task("still here"))
        [result] = await results.wait_for(1)
        assert result.output == "still here"
        assert len(errors.items) == 1


async def test_oversized_messages_are_refused(nats_url: str, prefix: str) -> None:
    async with echo_deployment(nats_url, prefix, max_message_bytes=4096) as (bus, errors, results):
        # Raw bytes: our own publisher would send a message this large by reference.
        await publish_raw(bus, encode(task("x" * 10_000)))
        [error] = await errors.wait_for(1)
        assert "oversized message" in error.reason and "4096" in error.reason
        await bus.publish_durable(bus.subject(Verb.STEP, "echo"), task("small"))
        [result] = await results.wait_for(1)
        assert result.output == "small"


async def test_large_messages_from_plancast_publishers_travel_by_reference(
    nats_url: str, prefix: str
) -> None:
    async with echo_deployment(nats_url, prefix, max_message_bytes=4096) as (bus, errors, results):
        await bus.publish_durable(bus.subject(Verb.STEP, "echo"), task("y" * 10_000),
                                  msg_id="big-1")
        [result] = await results.wait_for(1)
        assert result.output == "y" * 10_000 and errors.items == []


async def test_handler_exceptions_are_retried_then_dead_lettered(
    nats_url: str, prefix: str
) -> None:
    async with echo_deployment(nats_url, prefix, max_deliver=2) as (bus, errors, results):
        await bus.publish_durable(bus.subject(Verb.STEP, "echo"), task("boom"))
        first, final = await errors.wait_for(2)
        assert "RuntimeError: the tool exploded" in first.reason and "will retry" in first.reason
        assert "the tool exploded" in first.traceback
        assert "will retry" not in final.reason and final.dead_letter
        await bus.publish_durable(bus.subject(Verb.STEP, "echo"), task("after"))
        [result] = await results.wait_for(1)
        assert result.output == "after"


async def test_a_bad_request_gets_an_error_reply(nats_url: str, prefix: str) -> None:
    async with echo_deployment(nats_url, prefix) as (bus, _, _):
        reply = await bus.nc.request(bus.subject(Verb.RUN_SUBMIT), b"{oops", timeout=10)
        refused = decode(reply.data, ActorError)
        assert "not valid JSON" in refused.reason
        ok = await bus.request(
            bus.subject(Verb.RUN_SUBMIT),
            RunRequest(goal="g", run_id="r9"),
            RunAccepted | ActorError,
        )
        assert ok == RunAccepted(run_id="r9", events_subject="x")


async def test_heartbeats_name_the_actor(nats_url: str, prefix: str) -> None:
    beats = Watch(Heartbeat)
    async with echo_deployment(nats_url, prefix, heartbeat_interval=0.2) as (bus, _, _):
        await bus.nc.subscribe(
            subject(prefix, Verb.HEARTBEAT, "echo", "*", wildcard=True), cb=beats.cb
        )
        [beat, *_] = await beats.wait_for(1)
    assert beat.role == "echo" and beat.pid > 0 and beat.interval == 0.2


async def test_drain_finishes_work_in_hand(nats_url: str, prefix: str) -> None:
    settings = Settings(nats_url=nats_url, prefix=prefix)
    async with open_bus(settings) as bus:
        results = Watch(StepResult)
        await bus.nc.subscribe(subject(prefix, Verb.RESULT, "*", wildcard=True), cb=results.cb)
        actor = EchoActor(bus)
        async with anyio.create_task_group() as tg:
            await tg.start(actor.serve)
            await bus.publish_durable(bus.subject(Verb.STEP, "echo"), task("sleep:0.5"))
            await actor.working.wait()
            actor.drain()
        # serve() returned only after the slow task finished and was acked
        assert [r.output for r in await results.wait_for(1)] == ["sleep:0.5"]
        # The ack reached the server before serve() returned; the server applies it
        # asynchronously, so look until it shows (bounded).
        with anyio.move_on_after(5):
            while (await bus.js.consumer_info(  # noqa: ASYNC110 - server state, no event
                    stream_name(prefix, Stream.WORK), "step-echo")).num_ack_pending:
                await anyio.sleep(0.05)
        info = await bus.js.consumer_info(stream_name(prefix, Stream.WORK), "step-echo")
        assert info.num_ack_pending == 0 and info.num_pending == 0
        assert info.num_redelivered == 0


async def test_drain_timeout_hands_unfinished_work_back(nats_url: str, prefix: str) -> None:
    settings = Settings(nats_url=nats_url, prefix=prefix, drain_timeout=0.2)
    async with open_bus(settings) as bus:
        results = Watch(StepResult)
        await bus.nc.subscribe(subject(prefix, Verb.RESULT, "*", wildcard=True), cb=results.cb)
        first = EchoActor(bus)
        async with anyio.create_task_group() as tg:
            await tg.start(first.serve)
            await bus.publish_durable(bus.subject(Verb.STEP, "echo"), task("sleep:1"))
            await first.working.wait()
            first.drain()
        assert results.items == []
        second = EchoActor(bus)
        async with anyio.create_task_group() as tg:
            await tg.start(second.serve)
            [result] = await results.wait_for(1)
            second.drain()
        assert result.output == "sleep:1" and result.executor.endswith(second.instance)


async def test_a_worker_holds_no_more_work_than_its_concurrency(
    nats_url: str, prefix: str
) -> None:
    """Fetches ask for free slots only: the second task waits in the stream, not in a
    busy worker's buffer, where another instance could not take it."""
    settings = Settings(nats_url=nats_url, prefix=prefix)
    async with open_bus(settings) as bus, anyio.create_task_group() as tg:
        actor = EchoActor(bus, concurrency=1)
        await tg.start(actor.serve)
        for i in range(3):
            await bus.publish_durable(bus.subject(Verb.STEP, "echo"),
                                      task("sleep:3", step_id=i + 1))  # outlasts the check below
        await actor.working.wait()
        info = await bus.js.consumer_info(stream_name(prefix, Stream.WORK), "step-echo")
        assert info.num_ack_pending == 1 and info.num_pending == 2
        actor.drain()


async def test_a_worker_asks_for_as_many_tasks_as_it_has_room_for_in_one_request(
    nats_url: str, prefix: str
) -> None:
    """A wide layer is one pull request (up to ``PULL_CAP``), not one per 64 tasks: each
    next request goes out once every task of the last has its handler started, a round
    trip per 64 tasks (a 1,000-wide plan's last steps started 30 to 50 ms after they were sent)."""
    settings = Settings(nats_url=nats_url, prefix=prefix)
    asked: list[int] = []

    async def request(msg: Any) -> None:
        asked.append(json.loads(msg.data)["batch"])

    async with open_bus(settings) as bus, anyio.create_task_group() as tg:
        await bus.nc.subscribe(f"$JS.API.CONSUMER.MSG.NEXT.{stream_name(prefix, Stream.WORK)}"
                               ".step-echo", cb=request)
        results = Watch(StepResult, bus)
        await bus.nc.subscribe(subject(prefix, Verb.RESULT, "*", wildcard=True), cb=results.cb)
        actor = EchoActor(bus, concurrency=200)
        await tg.start(actor.serve)
        for i in range(150):
            await bus.publish_durable(bus.subject(Verb.STEP, "echo"), task("wide", step_id=i + 1))
        done = await results.wait_for(150)
        assert sorted(r.step_id for r in done) == list(range(1, 151))
        assert asked[0] == 200, f"the first pull asked for {asked[0]} of 200 free slots"
        actor.drain()


class TwoQueueEcho(EchoActor):
    """Echoes tasks from two work queues, sharing its slots between them."""

    def sources(self) -> Sequence[Source]:
        return [*super().sources(), WorkQueue(
            Stream.WORK, self.bus.subject(Verb.STEP, "echo2"), "step-echo2",
            accepts=(StepTask,))]


async def test_two_sources_waiting_for_one_slot_both_ask_once_it_is_free(
    nats_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both sources of a busy actor wait for its one slot. When it frees, each must ask for
    work: taking the slot and giving it back handed it to the other one, which then saw no
    room and, before, sent no request until its pull expired (1.2 s stalls in a benchmark
    shape); here an expiry longer than the test's deadline."""
    monkeypatch.setattr("runtime.bus.intake.FETCH_WAIT", 60.0)
    settings = Settings(nats_url=nats_url, prefix=prefix)
    async with open_bus(settings) as bus, anyio.create_task_group() as tg:
        results = Watch(StepResult, bus)
        await bus.nc.subscribe(subject(prefix, Verb.RESULT, "*", wildcard=True), cb=results.cb)
        actor = TwoQueueEcho(bus, concurrency=1)
        await tg.start(actor.serve)
        one, two = bus.subject(Verb.STEP, "echo"), bus.subject(Verb.STEP, "echo2")
        await bus.publish_durable(one, task("sleep:0.3", step_id=1))
        await bus.publish_durable(two, task("sleep:0.3", step_id=2))
        await results.wait_for(2)  # both sources ran a task through the one slot
        await bus.publish_durable(one, task("again", step_id=3))
        await bus.publish_durable(two, task("again", step_id=4))
        done = await results.wait_for(4)
        assert sorted(r.step_id for r in done) == [1, 2, 3, 4]
        actor.drain()
