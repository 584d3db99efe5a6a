"""The run event log: numbers 1..n, stored once each."""

from __future__ import annotations

import asyncio

import anyio
import msgspec
import pytest
from anyio import wait_all_tasks_blocked
from anyio.lowlevel import checkpoint
from nats.js.errors import NotFoundError

from actors.run import EventLog
from protocols import (
    EventBatch,
    RunFinished,
    RunStarted,
    Stream,
    Verb,
    encode,
    stored_events,
    stream_name,
)
from runtime.bus import Bus, Unsettled, open_bus, provision
from runtime.client import follow
from runtime.config import Settings

pytestmark = pytest.mark.anyio


async def messages(bus: Bus, prefix: str, run_id: str) -> list[bytes]:
    """Every message stored on the run's events subject, in stream order."""
    stream, subject = stream_name(prefix, Stream.EVENTS), f"{prefix}.event.{run_id}"
    found, seq = [], 1
    while True:
        try:
            raw = await bus.js.get_msg(stream, seq=seq, subject=subject, next=True)
        except NotFoundError:
            return found
        found.append(raw.data or b"")
        seq = int(raw.seq or seq) + 1


async def stored(bus: Bus, prefix: str, run_id: str) -> int:
    """How many events are stored (a batch counts each of its events)."""
    return sum(len(stored_events(data, run_id)) for data in await messages(bus, prefix, run_id))


async def test_sequential_emits_are_numbered_and_stored(nats_url: str, prefix: str) -> None:
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix)) as bus:
        log = EventLog(bus, "r1")
        seqs = [(await log.emit(RunStarted(run_id="r1", goal=f"g{i}"))).seq for i in range(5)]
        assert seqs == [1, 2, 3, 4, 5]
        await log.flush()  # storage is confirmed here
        assert await stored(bus, prefix, "r1") == 5
        assert log.subject == bus.subject(Verb.EVENT, "r1")


async def test_concurrent_emits_each_get_their_own_number(nats_url: str, prefix: str) -> None:
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix)) as bus:
        log = EventLog(bus, "r2")
        emitted = []

        async def emit(i: int) -> None:
            emitted.append(await log.emit(RunStarted(run_id="r2", goal=f"g{i}")))

        async with anyio.create_task_group() as tg:
            for i in range(5):
                tg.start_soon(emit, i)
        assert sorted(e.seq for e in emitted) == [1, 2, 3, 4, 5]
        await log.flush()
        assert await stored(bus, prefix, "r2") == 5


async def test_settle_stores_again_what_went_unconfirmed(nats_url: str, prefix: str) -> None:
    """A publish whose acknowledgement failed (here: no stream yet, as in a failover) is
    stored by settle(), after its successor; follow() still yields them in order."""
    settings = Settings(nats_url=nats_url, prefix=prefix, publish_retry_for=10)
    async with open_bus(settings, ensure_streams=False) as bus:
        log = EventLog(bus, "r3")
        async with anyio.create_task_group() as tg:
            tg.start_soon(log.write_behind)
            await log.emit(RunStarted(run_id="r3", goal="before the stream exists"))
            await wait_all_tasks_blocked()  # sent, and its acknowledgement is an error
            await provision(bus.js, prefix)  # the stream appears only now
            await log.emit(RunFinished(run_id="r3", answer="after"))
            await wait_all_tasks_blocked()
            await log.flush()
            tg.cancel_scope.cancel()
        assert await stored(bus, prefix, "r3") == 2
        first_stored = await bus.js.get_msg(stream_name(prefix, Stream.EVENTS), 1)
        assert first_stored.data is not None and b'"seq":2' in first_stored.data
        with anyio.fail_after(10):
            followed = [event async for event in follow(bus, "r3")]
    assert [type(e) for e in followed] == [RunStarted, RunFinished]
    assert [e.seq for e in followed] == [1, 2]


async def test_settle_does_not_wait_forever_for_a_lost_acknowledgement(
    nats_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that dies after a publish went out never acknowledges it: settle() gives
    up waiting and stores the message again (once, under its message id)."""
    monkeypatch.setattr("runtime.bus.jetstream.ACK_WAIT", 0.2)
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix)) as bus:
        never: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        payload = encode(RunStarted(run_id="r4", goal="lost ack"))
        lost = Unsettled(f"{prefix}.event.r4", payload, {"Nats-Msg-Id": "r4/e1"}, never)
        with anyio.fail_after(10):
            await bus.settle([lost])
        assert await stored(bus, prefix, "r4") == 1


async def test_a_lost_acknowledgement_given_up_by_one_settle_does_not_cancel_another(
    nats_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two tasks settle the same message (a run's save and an event's own write); the one
    whose wait ends first gives the acknowledgement up, cancelling its future. The other
    must go on and store the message, not be cancelled itself: a run's deadline check once
    died that way halfway through failing a step, and a late result of the attempt got in."""
    monkeypatch.setattr("runtime.bus.jetstream.ACK_WAIT", 0.2)
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix)) as bus:
        never: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        payload = encode(RunStarted(run_id="r5", goal="shared ack"))
        lost = Unsettled(f"{prefix}.event.r5", payload, {"Nats-Msg-Id": "r5/e1"}, never)
        finished: list[str] = []

        async def settle(name: str, delay: float) -> None:
            await anyio.sleep(delay)
            await bus.settle([lost])
            finished.append(name)

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(settle, "first", 0.0)
                tg.start_soon(settle, "second", 0.1)  # still waiting when the first gives up
        assert sorted(finished) == ["first", "second"]
        assert await stored(bus, prefix, "r5") == 1


async def test_the_events_of_one_moment_are_stored_as_one_batch(nats_url: str,
                                                                prefix: str) -> None:
    """Events emitted while the loop is busy go in one ``event.batch`` message (one store,
    one acknowledgement, one delivery); readers still get them one by one, in order."""
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix)) as bus:
        log = EventLog(bus, "r6")
        async with anyio.create_task_group() as tg:
            tg.start_soon(log.write_behind)
            for i in range(100):
                await log.emit(RunStarted(run_id="r6", goal=f"g{i}"))
            await log.emit(RunFinished(run_id="r6", answer="done"))
            await log.flush()
            tg.cancel_scope.cancel()
        stored_messages = await messages(bus, prefix, "r6")
        assert len(stored_messages) == 1
        assert msgspec.json.decode(stored_messages[0])["type"] == "event.batch"
        with anyio.fail_after(10):
            followed = [event async for event in follow(bus, "r6")]
        assert [e.seq for e in followed] == list(range(1, 102))
        assert isinstance(followed[-1], RunFinished)


async def test_events_apart_in_time_are_stored_apart_and_a_batch_stays_small(
    nats_url: str, prefix: str
) -> None:
    """An event emitted alone is stored as itself (as before batches existed); a batch
    takes no more than fits in half the largest message, so it is never offloaded."""
    settings = Settings(nats_url=nats_url, prefix=prefix, max_message_bytes=4096)
    async with open_bus(settings) as bus:
        log = EventLog(bus, "r7")
        async with anyio.create_task_group() as tg:
            tg.start_soon(log.write_behind)
            await log.emit(RunStarted(run_id="r7", goal="alone"))
            await wait_all_tasks_blocked()
            for i in range(40):
                await log.emit(RunStarted(run_id="r7", goal=f"{i:03d}" + "x" * 200))
            await checkpoint()
            await log.emit(RunFinished(run_id="r7", answer="y" * 10_000))  # offloaded alone
            await log.flush()
            tg.cancel_scope.cancel()
        stored_messages = await messages(bus, prefix, "r7")
        kinds = [msgspec.json.decode(m)["type"] for m in stored_messages]
        assert kinds[0] == "event.run.started"
        assert kinds[-1] == "message.offloaded"
        assert set(kinds[1:-1]) == {"event.batch"} and len(kinds) > 3
        batches = [msgspec.json.decode(m, type=EventBatch) for m in stored_messages[1:-1]]
        assert all(sum(len(e) for e in b.events) <= 2048 for b in batches)
        with anyio.fail_after(10):
            followed = [event async for event in follow(bus, "r7")]
        assert [e.seq for e in followed] == list(range(1, 43))


def test_a_broken_or_unknown_event_in_a_batch_skips_only_itself() -> None:
    good = [encode(RunStarted(run_id="r8", goal="g", seq=n)) for n in (1, 3)]
    batch = (b'{"type":"event.batch","schema_version":2,"run_id":"r8","events":['
             + good[0] + b',{"type":"event.from.the.future","seq":2},{"seq":"x"},'
             + good[1] + b"]}")
    assert [(n, type(e).__name__) for n, e in stored_events(batch, "r8")] == [
        (1, "RunStarted"), (2, "NoneType"), (0, "NoneType"), (3, "RunStarted")]
    assert stored_events(b"not json", "r8") == [(0, None)]
    assert stored_events(b'{"type":"event.batch","events":7}', "r8") == [(0, None)]


async def test_event_batch_1_stores_every_event_alone(nats_url: str, prefix: str) -> None:
    """``PLANCAST_EVENT_BATCH=1``: what a rolling upgrade from an older plancast needs (its
    planners and subscribers read one event per message)."""
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix, event_batch=1)) as bus:
        log = EventLog(bus, "r9")
        for i in range(20):
            await log.emit(RunStarted(run_id="r9", goal=f"g{i}"))
        await log.flush()
        stored_messages = await messages(bus, prefix, "r9")
        assert [msgspec.json.decode(m)["seq"] for m in stored_messages] == list(range(1, 21))
