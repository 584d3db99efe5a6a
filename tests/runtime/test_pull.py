"""The consume loop against a real nats-server: it asks for no more than there is room
for, loses nothing across requests, and says so when its consumer is gone."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest
from nats.js import api

from protocols import Stream, Verb, stream_name
from runtime.bus import Bus
from runtime.connection import open_bus
from runtime.pull import ConsumerGone, Pull
from runtime.settings import Settings

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
