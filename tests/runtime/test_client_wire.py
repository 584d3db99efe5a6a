"""plancast's NATS client where it departs from nats-py's for speed: the header block built
as one string, and direct subscriptions that hand messages over in the read loop with
their headers read only when asked for. Both must read and write what nats-py does (a
pull's status messages, read at once, are tested in test_pull)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import BadHeaderError
from nats.js import api

from runtime.bus import Delivery, header_block, open_bus
from runtime.config import Settings

pytestmark = pytest.mark.anyio


def nats_py_block(headers: dict[str, str]) -> bytes:
    """nats-py's own header block, from its publish path."""
    block = bytearray(b"NATS/1.0\r\n")
    for key, value in headers.items():
        if key.strip():
            block += key.strip().encode() + b": "
            block += value.strip().translate(str.maketrans({"\r": " ", "\n": " "})).encode()
            block += b"\r\n"
    return bytes(block + b"\r\n")


@pytest.mark.parametrize("headers", [
    {"Nats-Msg-Id": "run-1/2/3/f4"},
    {"Nats-Msg-Id": "a", "Nats-Expected-Last-Subject-Sequence": "17", "traceparent": "00-x"},
    {" Padded ": "  value  ", "": "skipped", "Multi": "line\r\none\ntwo"},
    {api.Header.EXPECTED_LAST_SUBJECT_SEQUENCE: "0", api.Header.MSG_ID: "x"},  # as KV sends
])
def test_the_header_block_is_nats_pys(headers: dict[str, str]) -> None:
    assert header_block(headers) == nats_py_block(headers)
    parsed = NatsClient._parse_header_lines(header_block(headers)[len(b"NATS/1.0\r\n"):])
    assert parsed == {k.strip(): v.strip().replace("\r", " ").replace("\n", " ")
                      for k, v in headers.items() if k.strip()}


def test_a_header_key_that_is_not_a_token_is_refused() -> None:
    with pytest.raises(BadHeaderError):
        header_block({"Bad Key": "x"})


async def test_a_direct_subscription_reads_headers_only_when_asked(
    nats_url: str, prefix: str
) -> None:
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix)) as bus:
        got: list[Any] = []
        arrived = anyio.Event()

        def take(msg: Any) -> None:
            got.append(msg)
            if len(got) == 3:
                arrived.set()

        nc: Any = bus.nc
        await nc.subscribe_direct(f"{prefix}.direct", take)
        await bus.nc.publish(f"{prefix}.direct", b"plain")
        await bus.nc.publish(f"{prefix}.direct", b"with", headers={"Nats-Msg-Id": "m-1",
                                                                    "Other": " spaced "})
        await bus.nc.publish(f"{prefix}.direct", b"", headers={"Status-Like": "no"})
        with anyio.fail_after(10):
            await arrived.wait()
        plain, with_headers, empty = got
        assert plain.data == b"plain" and plain.headers is None
        assert with_headers.headers is None  # not read yet
        assert Delivery(with_headers, durable=False).headers == {"Nats-Msg-Id": "m-1",
                                                                 "Other": "spaced"}
        assert Delivery(empty, durable=False).headers == {"Status-Like": "no"}


@pytest.mark.parametrize("reply", [
    "$JS.ACK.PP_WORK.step-worker.3.1042.17.1795712689273706400.0",
    "$JS.ACK._.ACCHASH.PP_WORK.step-worker.3.1042.17.1795712689273706400.0.rand",
    "$JS.ACK.hub.ACCHASH.PP_WORK.step-worker.3.1042.17.1795712689273706400.0",
])
def test_delivery_count_and_stream_sequence_read_as_nats_py_reads_them(reply: str) -> None:
    msg = Msg(_client=None, subject="x", reply=reply)  # type: ignore[arg-type]
    delivery = Delivery(msg, durable=True)
    metadata = Msg.Metadata._from_reply(reply)
    assert (delivery.deliveries, delivery.stream_seq) == \
        (metadata.num_delivered, metadata.sequence.stream) == (3, 1042)
