"""The consume loop against a real nats-server: it asks for no more than there is room
for, loses nothing across requests, and says so when its consumer is gone."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest
from nats.js import api

from protocols import Stream, Verb, stream_name
from runtime.bus import Bus, ConsumerGone, Pull, open_bus
from runtime.config import Settings

pytestmark = pytest.mark.anyio

EXPIRES = 0.3


async def _queue(bus: Bus, count: int) -> Pull:
    """``count`` messages on a work subject and a pull on a consumer of their own."""
    stream, subj = stream_name(bus.prefix, Stream.WORK), bus.subject(Verb.STEP, "pulled")
    await bus.js.add_consumer(stream, api.ConsumerConfig(
        durable_name="pulled", ack_policy=api.AckPolicy.EXPLICIT, filter_subject=subj))
    for n in range(count):
        await bus.js.publish(subj, str(n).encode())
    pull = Pull(bus, stream, "pulled", cap=64, expires=EXPIRES)
    await pull.start()
    return pull


async def _take(pull: Pull, room: Callable[[], int], want: int) -> list[bytes]:
    got: list[bytes] = []
    with anyio.fail_after(10):
        while len(got) < want:
            for msg in await pull.next_batch(room):
                got.append(msg.data)
                await msg.ack()
    return got


async def test_a_pull_asks_only_for_the_room_there_is_and_loses_nothing(
    nats_url: str, prefix: str
) -> None:
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix)) as bus:
        pull = await _queue(bus, 5)
        first = await _take(pull, lambda: 3, 3)
        assert await pull.next_batch(lambda: 0) == []  # no room: nothing asked, nothing came
        rest = await _take(pull, lambda: 10, 2)
        assert sorted(first + rest) == [b"0", b"1", b"2", b"3", b"4"]
        assert await pull.next_batch(lambda: 10) == []  # the request expires empty
        await pull.stop()


async def test_a_pull_whose_consumer_is_deleted_says_so(nats_url: str, prefix: str) -> None:
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix)) as bus:
        pull = await _queue(bus, 0)
        await bus.js.delete_consumer(stream_name(bus.prefix, Stream.WORK), "pulled")
        with pytest.raises(ConsumerGone), anyio.fail_after(10):
            while True:
                await pull.next_batch(lambda: 1)
        await pull.stop()


async def test_a_pull_with_no_room_returns_at_once_so_its_caller_asks_when_room_comes(
    nats_url: str, prefix: str
) -> None:
    """Two sources of one actor waiting for its one slot: the first woken may find the slot
    handed on to the second. Its pull must not then wait out an expiry with no request open
    (a synthesis task sat 1.2 s in 1 run of 10 of a benchmark shape)."""
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix)) as bus:
        pull = await _queue(bus, 1)
        pull.expires = 60.0  # waiting for it would hang the test, not slow it
        room = 0
        with anyio.fail_after(20):
            assert await pull.next_batch(lambda: room) == []
            room = 1
            got = await pull.next_batch(lambda: room)
        assert [m.data for m in got] == [b"0"]
        await got[0].ack()
        await pull.stop()


async def test_messages_taken_as_they_are_read_keep_their_order_and_are_all_asked_for(
    nats_url: str, prefix: str
) -> None:
    """``take`` gets each message as it is read while none waits; once it refuses one (no
    room), the ones after wait behind it rather than pass it; a request used up by taken
    messages is followed by another."""
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix)) as bus:
        pull = await _queue(bus, 0)
        taken: list[bytes] = []
        room = {"free": 2}

        def take(msg: object) -> bool:
            if room["free"] == 0:
                return False
            room["free"] -= 1
            taken.append(msg.data)  # type: ignore[attr-defined]
            return True

        pull.take = take
        subj = bus.subject(Verb.STEP, "pulled")
        assert await pull.next_batch(lambda: 4) == []  # asks for 4; nothing yet
        for n in range(6):
            await bus.js.publish(subj, str(n).encode())
        waited = await _take(pull, lambda: 4, 2)  # 0 and 1 were taken; 2 and 3 wait
        assert taken == [b"0", b"1"] and waited == [b"2", b"3"]
        room["free"] = 10
        with anyio.fail_after(10):  # a new request: 4 and 5 are taken as they come
            while len(taken) < 4:
                assert await pull.next_batch(lambda: 4) == []
        assert taken == [b"0", b"1", b"4", b"5"]
        await pull.stop()
