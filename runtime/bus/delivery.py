"""One received message and the ways to settle it, the same for core NATS and JetStream."""

from __future__ import annotations

import time
from typing import Any

from nats.aio.client import Client as NatsClient

from protocols import Message, encode

V1_TOKENS, V2_TOKENS = 9, 11
"""Tokens of a JetStream reply subject without and with a domain (nats-py's counts)."""


def parse_headers(raw: bytes) -> dict[str, str]:
    """A NATS header block without a status line (``NATS/1.0`` then ``Name: Value`` lines),
    read the way nats-py reads it."""
    return NatsClient._parse_header_lines(raw[len(b"NATS/1.0\r\n"):])


class Delivery:
    """Where a message came from and how to settle it.

    For JetStream work the message stays owned by us until ``ack`` (done), ``nak``
    (give it back for redelivery) or ``term`` (never redeliver). Core NATS messages have
    nothing to settle; those calls are no-ops there.
    """

    __slots__ = ("_connection", "_fields", "_msg", "durable", "max_deliver", "received_at",
                 "settled", "size", "subject")

    def __init__(self, msg: Any, *, durable: bool, max_deliver: int = 1) -> None:
        self._msg = msg
        self.durable = durable
        self.max_deliver = max_deliver
        """The consumer's delivery limit (-1: none)."""
        self.subject: str = msg.subject
        self.size = len(msg.data)
        self.received_at = time.monotonic()
        self.settled = False
        self._fields: tuple[int, int] | None = None
        stamped = getattr(msg, "received_on", None)
        self._connection = int(stamped) if stamped is not None else _connection_of(msg)
        """The connection the message was read on (stamped by ``PlancastClient``; else the
        one current now)."""

    @property
    def data(self) -> bytes:
        return bytes(self._msg.data)

    @property
    def headers(self) -> dict[str, str]:
        msg = self._msg
        if msg.headers is None and getattr(msg, "raw_headers", None):
            msg.headers = parse_headers(msg.raw_headers)
        return dict(msg.headers or {})

    @property
    def reply(self) -> str:
        return str(self._msg.reply or "")

    @property
    def deliveries(self) -> int:
        """How many times JetStream has delivered this message (1 on the first try)."""
        if not self.durable:
            return 1
        return self._ack_fields()[0]

    @property
    def stream_seq(self) -> int:
        """The message's sequence in its stream: unique per stored message (0 for core NATS)."""
        if not self.durable:
            return 0
        return self._ack_fields()[1]

    def _ack_fields(self) -> tuple[int, int]:
        """(delivery count, stream sequence), read off the reply subject as nats-py reads
        its metadata, without the timestamp and the objects it builds for the rest:
        ``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>...`` (9 tokens), or with
        a domain and an account hash after ``ACK`` (11 or more)."""
        if self._fields is not None:
            return self._fields
        self._fields = self._read_ack_fields()
        return self._fields

    def _read_ack_fields(self) -> tuple[int, int]:
        tokens = self._msg.reply.split(".") if self._msg.reply else []
        if tokens[:2] == ["$JS", "ACK"]:
            if len(tokens) == V1_TOKENS:
                return int(tokens[4]), int(tokens[5])
            if len(tokens) >= V2_TOKENS:
                return int(tokens[6]), int(tokens[7])
        metadata = self._msg.metadata  # not a JetStream message: nats-py says why
        return int(metadata.num_delivered), int(metadata.sequence.stream)

    def retries_left(self) -> bool:
        """Will JetStream deliver this message again if it is not acknowledged?"""
        return self.durable and (self.max_deliver < 0 or self.deliveries < self.max_deliver)

    async def ack(self) -> None:
        """The outcome is safely published: the message is done."""
        if self.durable and not self.settled:
            self.settled = True
            await self._msg.ack()

    async def nak(self, delay: float | None = None) -> None:
        """Hand the message back for redelivery (after ``delay`` seconds)."""
        if self.durable and not self.settled:
            self.settled = True
            await self._msg.nak(delay=delay)

    async def term(self) -> None:
        """Never redeliver: the message cannot be handled (it was dead-lettered first)."""
        if self.durable and not self.settled:
            self.settled = True
            await self._msg.term()

    async def in_progress(self) -> None:
        """Still working: reset the ack-wait timer so the message is not redelivered."""
        if self.durable and not self.settled:
            await self._msg.in_progress()

    async def respond(self, message: Message) -> None:
        """Answer a request (core NATS request/reply), on the connection it came in on only.

        A server lets a user answer (``allow_responses``) on the connection that received
        the request: an answer sent after a reconnect is refused as a permission violation
        and lost, so it is not sent; the requester asks again (``runtime.client.submit``
        does until its deadline).
        """
        if self.reply and _connection_of(self._msg) == self._connection:
            await self._msg.respond(encode(message))


def _connection_of(msg: Any) -> int:
    """Which connection of its client a message's client is on now: its reconnect count,
    or -1 while it is reconnecting (what is published then goes out on the next one)."""
    client = getattr(msg, "_client", None)
    if client is None:  # a message made by hand: its one connection
        return 0
    return int(client.stats["reconnects"]) if client.is_connected else -1
