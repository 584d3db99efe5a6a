"""The connection to NATS, bound to one deployment prefix, with typed publish helpers.

Connecting (and starting an embedded server when no URL is set) is in ``connection``.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import msgspec
from nats.aio.client import Client as NatsClient
from nats.errors import ConnectionReconnectingError, NoRespondersError
from nats.js.errors import APIError, NoStreamResponseError, ServiceUnavailableError
from nats.nuid import NUID

from protocols import Message, ObjectRef, Offloaded, Verb, decode, encode, objects_bucket, subject

from .settings import Settings

log = logging.getLogger(__name__)
_nuid = NUID()


def offloaded(data: bytes) -> Offloaded | None:
    """The envelope ``data`` is, if it stands in for a message sent by reference."""
    try:
        envelope: Offloaded = decode(data, Offloaded)
    except msgspec.MsgspecError:
        return None
    return envelope


def nuid() -> str:
    """A unique name for an offloaded message without an id of its own."""
    return _nuid.next().decode()

M = TypeVar("M")

TRANSIENT: tuple[type[Exception], ...] = (
    TimeoutError, NoRespondersError, NoStreamResponseError, ServiceUnavailableError,
    ConnectionReconnectingError,
)
"""Publish failures that pass on their own (during failover); retried when idempotent."""
UNCONFIRMED: tuple[type[Exception], ...] = (*TRANSIENT, APIError)
ACK_WAIT = 5.0
"""Seconds to wait for an asynchronous publish's acknowledgement before storing it again."""
"""Why an asynchronous publish may go unconfirmed: then it is stored again."""


@dataclass(frozen=True)
class Unsettled:
    """A message sent to JetStream whose acknowledgement has not been awaited yet."""

    subject: str
    payload: bytes
    headers: dict[str, str]
    future: Any
    """nats-py's future of the publish acknowledgement (None: sending failed at once)."""


class Bus:
    """A NATS connection and its JetStream context, for one prefix."""

    def __init__(self, nc: NatsClient, settings: Settings, server_url: str) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.settings = settings
        self.prefix = settings.prefix
        self.server_url = server_url
        """The URL actually connected to (the embedded server's when one was started)."""

    def subject(self, verb: Verb, *tokens: str) -> str:
        """A subject under this deployment's prefix."""
        return subject(self.prefix, verb, *tokens)

    @property
    def max_payload(self) -> int:
        """The server's largest message, in bytes."""
        return int(self.nc.max_payload)

    async def publish(
        self, subj: str, message: Message, headers: dict[str, str] | None = None
    ) -> None:
        """Fire-and-forget on core NATS (heartbeats, replies)."""
        await self.nc.publish(subj, encode(message), headers=headers)

    async def publish_durable(
        self, subj: str, message: Message, *, msg_id: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> int:
        """Publish to JetStream and wait until it is stored; returns the stream sequence.

        ``msg_id`` becomes ``Nats-Msg-Id``: the same id within the duplicate window is
        stored once, so a retry after a lost ack is not a second task.
        """
        payload, hdrs = await self._prepare(message, msg_id, headers)
        return await self._store(subj, payload, hdrs, retry=msg_id is not None)

    async def publish_soon(self, subj: str, message: Message, *, msg_id: str) -> Unsettled:
        """Send to JetStream now, wait for the acknowledgement later (``settle``).

        Messages sent this way on one connection are stored in the order they were sent;
        whoever acknowledges work that depends on them settles them first.
        """
        payload, hdrs = await self._prepare(message, msg_id, None)
        try:
            future = await self.js.publish_async(subj, payload, headers=hdrs)
        except TRANSIENT:
            future = None  # settle() stores it the slow way
        return Unsettled(subj, payload, hdrs, future)

    async def settle(self, sent: Sequence[Unsettled]) -> None:
        """Wait until every message sent with ``publish_soon`` is stored (re-sending any
        whose acknowledgement failed: the message id makes that safe)."""
        for item in sent:
            try:
                if item.future is None:
                    raise TimeoutError
                # An acknowledgement lost with a dying server never arrives: bounded wait.
                with anyio.fail_after(ACK_WAIT):
                    await item.future
            except UNCONFIRMED as exc:
                log.info("publish to %s unconfirmed (%s); storing it again", item.subject, exc)
                await self._store(item.subject, item.payload, item.headers, retry=True)

    async def _prepare(
        self, message: Message, msg_id: str | None, headers: dict[str, str] | None
    ) -> tuple[bytes, dict[str, str]]:
        hdrs = dict(headers or {})
        if msg_id is not None:
            hdrs["Nats-Msg-Id"] = msg_id
        payload = encode(message)
        if len(payload) > self.settings.max_message_bytes:
            payload = await self._offload(payload, message, msg_id)
        return payload, hdrs

    async def _store(self, subj: str, payload: bytes, hdrs: dict[str, str], *,
                     retry: bool) -> int:
        delay, deadline = 0.05, anyio.current_time() + self.settings.publish_retry_for
        while True:
            try:
                ack = await self.js.publish(subj, payload, headers=hdrs or None)
                return int(ack.seq)
            except TRANSIENT as exc:  # a leader election or a reconnect: try again
                if not retry or anyio.current_time() + delay > deadline:
                    raise
                log.info("publish to %s failed (%s); retrying in %.2fs", subj, exc, delay)
                await anyio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _offload(self, payload: bytes, message: Message, msg_id: str | None) -> bytes:
        """Store a too-large message in the object store; return the envelope to send."""
        name = f"msg/{msg_id or nuid()}"
        ref = await self.put_object(name, payload)
        tag = msgspec.inspect.type_info(type(message)).tag  # type: ignore[attr-defined]
        log.debug("offloaded %d-byte %s to %s", len(payload), tag, name)
        return encode(Offloaded(ref=ref, inner_type=str(tag)))

    async def put_object(self, name: str, data: bytes) -> ObjectRef:
        """Keep ``data`` in the deployment's object store; a reference travels instead."""
        store = await self.js.object_store(objects_bucket(self.prefix))
        await store.put(name, data)
        return ObjectRef(bucket=objects_bucket(self.prefix), name=name, size=len(data),
                         sha256=hashlib.sha256(data).hexdigest())

    async def get_object(self, ref: ObjectRef) -> bytes:
        """Fetch what ``put_object`` stored, checking its digest."""
        store = await self.js.object_store(ref.bucket)
        data = bytes((await store.get(ref.name)).data or b"")
        if ref.sha256 and hashlib.sha256(data).hexdigest() != ref.sha256:
            raise ValueError(f"object {ref.name} does not match its digest")
        return data

    async def resolve(self, data: bytes) -> bytes:
        """The bytes of the real message, fetching it if ``data`` is an Offloaded envelope."""
        envelope = offloaded(data)
        return data if envelope is None else await self.get_object(envelope.ref)

    async def request(
        self, subj: str, message: Message, reply_type: type[M] | Any, *, timeout: float = 10.0
    ) -> M:
        """Request/reply with typed decoding of the answer."""
        reply = await self.nc.request(subj, encode(message), timeout=timeout)
        result: M = decode(reply.data, reply_type)
        return result
