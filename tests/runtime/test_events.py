"""The run event log: numbers 1..n, stored once each."""

from __future__ import annotations

import asyncio

import anyio
import pytest

import runtime.jetstream as jetstream
from protocols import RunFinished, RunStarted, Stream, Verb, encode, stream_name
from runtime.bus import Bus, Unsettled
from runtime.client import follow
from runtime.connection import open_bus
from runtime.events import EventLog
from runtime.provision import provision
from runtime.settings import Settings

pytestmark = pytest.mark.anyio


async def stored(bus: Bus, prefix: str, run_id: str) -> int:
    info = await bus.js.stream_info(
        stream_name(prefix, Stream.EVENTS), subjects_filter=f"{prefix}.event.{run_id}")
    return int(sum((info.state.subjects or {}).values()))


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
        await log.emit(RunStarted(run_id="r3", goal="before the stream exists"))
        await provision(bus.js, prefix)  # the stream appears only now
        await log.emit(RunFinished(run_id="r3", answer="after"))
        await log.flush()
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
    monkeypatch.setattr(jetstream, "ACK_WAIT", 0.2)
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
    monkeypatch.setattr(jetstream, "ACK_WAIT", 0.2)
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
