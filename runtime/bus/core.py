"""The connection to NATS, bound to one deployment prefix, with typed publish helpers.

Connecting (and starting an embedded server when no URL is set) is in ``connection``.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import msgspec
from nats.aio.client import Client as NatsClient
from nats.errors import ConnectionReconnectingError, NoRespondersError
from nats.js.client import JetStreamContext
from nats.js.errors import APIError, NoStreamResponseError, NotFoundError, ServiceUnavailableError
from nats.nuid import NUID

from protocols import (
    CHUNK_BYTES,
    UNREADABLE,
    InvalidSubjectToken,
    Message,
    ObjectRef,
    Offloaded,
    Verb,
    chunk_subject,
    decode,
    encode,
    object_name,
    object_space,
    objects_bucket,
    space_of,
    stream_name,
    stream_of,
    subject,
)

from ..config import Settings
from .budget import ByteBudget
from .errors import Fenced, ObjectRefused, PublishRefused, StorageFull
from .jetstream import JetStream, acknowledged, outcome
from .refusals import Refusals

MAX_OBJECT_BYTES = 64 * 1024 * 1024
"""Largest payload an actor fetches through an ``message.offloaded`` reference, unless
``PLANCAST_MAX_OBJECT_BYTES`` says otherwise."""
OBJECT_LAG = 2.0
"""Seconds a reader keeps asking for a chunk it does not find: on a cluster, a replica that
has not stored it yet may answer before the one that has."""
FETCHING = 2
"""Fetches of the largest size a process holds at once (``ByteBudget``)."""
_DIGEST = re.compile(r"[0-9a-fA-F]{64}")

log = logging.getLogger(__name__)
_nuid = NUID()


@functools.lru_cache(maxsize=4096)
def _subject(prefix: str, verb: Verb, tokens: tuple[str, ...]) -> str:
    return subject(prefix, verb, *tokens)


def offloaded(data: bytes) -> Offloaded | None:
    """The envelope ``data`` is, if it stands in for a message sent by reference."""
    try:
        envelope: Offloaded = decode(data, Offloaded)
    except UNREADABLE:
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
"""Failures that pass on their own (leader elections, reconnects): retried, never fatal."""
RETRY_CAP = 0.5
"""Longest pause between retries through a failover: a new stream leader is noticed soon
after it is elected (the election itself takes nats-server 4-9 s after a crash)."""
UNCONFIRMED: tuple[type[Exception], ...] = (*TRANSIENT, APIError)
"""Why an asynchronous publish may go unconfirmed: then it is stored again."""
WRONG_LAST_SEQUENCE = 10071
"""JetStream's error code for a publish whose ``Nats-Expected-*`` condition failed."""
FENCE_BUSY = 10164
"""A replicated stream admits one write at a time expecting a given subject's sequence;
the others in flight get this ("wrong last sequence", no number): retry, not a fence."""
ID_IN_PROCESS = 10158
"""A replicated stream is still storing an earlier publish with the same ``Nats-Msg-Id``
(our own retry after a lost answer): try again, and the answer is that one's."""
EXPECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
EXPECT_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"
EXPECT_STREAM = "Nats-Expected-Stream"
"""A publish is stored only by the stream it names (never by another that took the subject)."""


MISSING: tuple[type[Exception], ...] = (NotFoundError, *TRANSIENT)
"""Why a chunk may not be read this moment (``Bus._chunk``)."""


STORAGE_FULL = 10077
"""JetStream's "maximum bytes exceeded": a stream that refuses new messages is full."""


def _full(exc: APIError, where: str) -> StorageFull:
    return StorageFull(f"{where} is full ({exc.description}): raise PLANCAST_MAX_STREAM_BYTES "
                       "(then `plancast provision`) or wait for old runs to age out")


def fence_headers(fence_subject: str, fence_seq: int) -> dict[str, str]:
    """Headers that make a publish succeed only while ``fence_subject``'s last message is
    ``fence_seq``: a writer that lost its claim can no longer add anything."""
    return {EXPECT_SEQ: str(fence_seq), EXPECT_SUBJECT: fence_subject}


@dataclass
class Unsettled:
    """A message sent to JetStream whose acknowledgement has not been awaited yet."""

    subject: str
    payload: bytes
    headers: dict[str, str]
    future: Any
    """nats-py's future of the publish acknowledgement (None: sending failed at once)."""
    seq: int = 0
    """Its stream sequence, once ``settle`` confirmed it."""
    fresh: bool = False
    """Nobody of ours sent a message under its id before: a duplicate is someone else's."""


class Bus:
    """A NATS connection and its JetStream context, for one prefix."""

    def __init__(self, nc: NatsClient, settings: Settings, server_url: str) -> None:
        self.nc = nc
        self.js: JetStreamContext = JetStream(nc)
        self.pipeline_fenced = True
        """Fenced writes go out without waiting for each other, until the server says it
        takes them one at a time (a replicated stream): then they are sent in turn."""
        self.settings = settings
        self.prefix = settings.prefix
        self.server_url = server_url
        self.provisions = True
        """This connection's user may create streams and consumers (not a role's user of
        ``plancast auth init``, which binds only to what ``plancast provision`` made)."""
        """The URL actually connected to (the embedded server's when one was started)."""
        self.fetching = ByteBudget(FETCHING * settings.max_object_bytes)
        """Bytes of objects being fetched at once: a burst of references takes turns."""
        self.refusals = Refusals()
        """Publishes the server refuses, reported by the connection's error callback."""

    def subject(self, verb: Verb, *tokens: str) -> str:
        """A subject under this deployment's prefix (each built and checked once: a
        run's subjects are asked for again with every step)."""
        return _subject(self.prefix, verb, tokens)

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
        headers: dict[str, str] | None = None, fresh: bool = False,
    ) -> int:
        """Publish to JetStream and wait until it is stored; returns the stream sequence.

        ``msg_id`` becomes ``Nats-Msg-Id``: the same id within the duplicate window is
        stored once, so a retry after a lost ack is not a second task (``fresh``: see
        ``publish_soon``).
        """
        payload, hdrs = await self._prepare(subj, message, msg_id, headers)
        return await self._store(subj, payload, hdrs, retry=msg_id is not None,
                                 fresh=fresh and msg_id is not None)

    def write_now(self) -> None:
        """Send what was published in this event-loop turn now, not when the turn ends
        (plancast's client; another client sends it when the loop is free, as always)."""
        write = getattr(self.nc, "write_now", None)
        if write is not None:
            write()

    async def publish_soon(self, subj: str, message: Message, *, msg_id: str,
                           headers: dict[str, str] | None = None,
                           fresh: bool = False) -> Unsettled:
        """Send to JetStream now, wait for the acknowledgement later (``settle``).
        ``fresh``: no process of ours ever sent a message under ``msg_id``, so a duplicate
        on the first try was stored by someone else (it is sent again under a new id).

        Messages sent this way on one connection are stored in the order they were sent;
        whoever acknowledges work that depends on them settles them first.
        """
        payload, hdrs = await self._prepare(subj, message, msg_id, headers)
        try:
            future = await self.js.publish_async(subj, payload, headers=hdrs)
        except TRANSIENT:
            future = None  # settle() stores it the slow way
        return Unsettled(subj, payload, hdrs, future, fresh=fresh)

    async def settle(self, sent: Sequence[Unsettled]) -> None:
        """Wait until every message sent with ``publish_soon`` is stored (re-sending any
        whose acknowledgement failed: the message id makes that safe). ``Fenced`` if a
        fenced one was refused."""
        await acknowledged([i.future for i in sent if not i.seq])
        for item in sent:
            if item.seq:
                continue
            try:
                ack = outcome(item.future)
                if self._ours(ack, item.headers, item.fresh):
                    item.seq = int(ack.seq)
                    continue
            except UNCONFIRMED as exc:
                if getattr(exc, "err_code", None) == WRONG_LAST_SEQUENCE \
                        and EXPECT_SEQ in item.headers:
                    raise Fenced(f"{item.subject}: {exc}") from exc
                log.info("publish to %s unconfirmed (%r); storing it again", item.subject, exc)
            item.seq = await self._store(item.subject, item.payload, item.headers, retry=True)

    def fence_busy(self) -> None:
        """The server refused a fenced write because another was in flight."""
        if self.pipeline_fenced:
            log.info("the server takes fenced writes one at a time (a replicated stream); "
                     "sending them in turn from now on")
            self.pipeline_fenced = False

    async def delete(self, stream: str, seq: int) -> None:
        """Remove one message (a task nobody should run any more); best effort."""
        try:
            await self.js.delete_msg(stream, seq)
        except Exception as exc:  # gone already, or the server is busy: it is only hygiene
            log.debug("could not delete %s/%d: %s", stream, seq, exc)

    async def _prepare(
        self, subj: str, message: Message, msg_id: str | None, headers: dict[str, str] | None
    ) -> tuple[bytes, dict[str, str]]:
        hdrs = dict(headers or {})
        if msg_id is not None:
            hdrs["Nats-Msg-Id"] = msg_id
        payload = encode(message)
        if len(payload) > self.settings.max_message_bytes:
            payload = await self._offload(subj, payload, message)
        return payload, hdrs

    async def _store(self, subj: str, payload: bytes, hdrs: dict[str, str], *,
                     retry: bool, fresh: bool = False) -> int:
        delay, deadline = 0.05, anyio.current_time() + self.settings.publish_retry_for
        while True:
            first, fresh = fresh, False  # after one try, a duplicate may be that try's
            try:
                ack = await self.js.publish(subj, payload, headers=hdrs or None)
                if self._ours(ack, hdrs, first):
                    return int(ack.seq)
                continue
            except APIError as exc:
                if exc.err_code == STORAGE_FULL:
                    raise _full(exc, self._stream_behind(subj)) from exc
                if getattr(exc, "err_code", None) == WRONG_LAST_SEQUENCE and EXPECT_SEQ in hdrs:
                    raise Fenced(f"{subj}: {exc.description}") from exc
                if getattr(exc, "err_code", None) == FENCE_BUSY:
                    self.fence_busy()
                elif not isinstance(exc, TRANSIENT) \
                        and getattr(exc, "err_code", None) != ID_IN_PROCESS:
                    raise
                if not retry or anyio.current_time() + delay > deadline:
                    raise
                log.info("publish to %s failed (%s); retrying in %.2fs", subj, exc, delay)
                await anyio.sleep(delay)
                delay = min(delay * 2, RETRY_CAP)
            except TRANSIENT as exc:  # a leader election or a reconnect: try again
                if not retry or anyio.current_time() + delay > deadline:
                    raise
                log.info("publish to %s failed (%s); retrying in %.2fs", subj, exc, delay)
                await anyio.sleep(delay)
                delay = min(delay * 2, RETRY_CAP)

    def _ours(self, ack: Any, hdrs: dict[str, str], fresh: bool) -> bool:
        """Is the message the stream kept for our de-duplicated publish ours? A ``fresh`` id
        (never sent by us before) was taken by someone else: ``hdrs`` gets a new id to send
        ours under (False), so nothing waits on a message that will never come. Any other
        duplicate is a retry of ours: our ids are keyed (``runtime.nonces``) or name the
        task they answer, so nobody else can store one first."""
        if not ack.duplicate or not fresh:
            return True
        taken = hdrs["Nats-Msg-Id"]
        hdrs["Nats-Msg-Id"] = f"{taken}/{nuid()}"
        log.warning("message id %s was taken by another message (stream %s, sequence %d); "
                    "sending ours as %s", taken, ack.stream, ack.seq, hdrs["Nats-Msg-Id"])
        return False

    def _stream_behind(self, subj: str) -> str:
        kind = stream_of(self.prefix, subj)
        return f"stream {stream_name(self.prefix, kind)} ({subj})" if kind is not None \
            else f"the stream behind {subj}"

    async def _offload(self, subj: str, payload: bytes, message: Message) -> bytes:
        """Store a too-large message in the object store, under its subject's space (where
        its readers, and only they, may read it); return the envelope to send."""
        ref = await self.put_object(object_space(self.prefix, subj), payload)
        tag = msgspec.inspect.type_info(type(message)).tag  # type: ignore[attr-defined]
        log.debug("offloaded %d-byte %s to %s", len(payload), tag, ref.name)
        return encode(Offloaded(ref=ref, inner_type=str(tag)))

    async def put_object(self, space: str, data: bytes) -> ObjectRef:
        """Keep ``data`` in the deployment's object store under ``space`` (see
        ``protocols.objects``); a reference travels instead.

        Every object gets a name of its own, so nothing stored is ever replaced."""
        if len(data) > self.settings.max_object_bytes:
            raise StorageFull(f"a {len(data)}-byte payload is more than the object store "
                              f"takes ({self.settings.max_object_bytes} bytes, "
                              "PLANCAST_MAX_OBJECT_BYTES)")
        name = object_name(space, nuid())
        for index, start in enumerate(range(0, len(data), CHUNK_BYTES)):
            await self._store(chunk_subject(self.prefix, name, index),
                              data[start:start + CHUNK_BYTES], {}, retry=True)
        return ObjectRef(bucket=objects_bucket(self.prefix), name=name, size=len(data),
                         sha256=hashlib.sha256(data).hexdigest())

    async def get_object(self, ref: ObjectRef, *, space: str | None = None,
                         limit: int | None = None) -> bytes:
        """Fetch what ``put_object`` stored, checking the reference before anything is
        fetched: our own bucket, a digest, a name in ``space`` when given (whoever sent it
        may write there only), a size its sender may send (``limit``, at most
        ``PLANCAST_MAX_OBJECT_BYTES``). The chunks are read into at most that size, the
        digest taken as they come.

        Each chunk is read with a direct get naming its subject: the server lets a user
        read only the spaces of the messages it may read. (No consumer either: a consumer
        can be told to deliver stored bytes to any subject, nats-server#8274.)"""
        own = objects_bucket(self.prefix)
        most = min(limit or self.settings.max_object_bytes, self.settings.max_object_bytes)
        try:
            where = space_of(ref.name)
        except InvalidSubjectToken:
            where = None
        if ref.bucket != own or not _DIGEST.fullmatch(ref.sha256) or not 0 <= ref.size <= most \
                or where is None or space not in (None, where):
            raise ObjectRefused(
                f"refused an object reference to {ref.bucket}/{ref.name} ({ref.size} bytes) "
                f"unfetched: references must name bucket {own} and an object <space>/<key>"
                f"{f' of space {space}' if space else ''}, carry a sha256 and stay within "
                f"the {most} bytes their sender may send by reference")
        async with self.fetching.holding(ref.size):
            digest, data, index = hashlib.sha256(), bytearray(), 0
            while len(data) < ref.size:
                part = await self._chunk(ref.name, chunk_subject(self.prefix, ref.name, index))
                if not part or len(data) + len(part) > ref.size:
                    raise ObjectRefused(f"object {ref.name} is not of the {ref.size} bytes "
                                        "it says")
                digest.update(part)
                data += part
                index += 1
            if digest.hexdigest() != ref.sha256.lower():
                raise ObjectRefused(f"object {ref.name} does not match its digest")
            return bytes(data)

    async def _chunk(self, name: str, chunk: str) -> bytes:
        """One stored chunk, asked for again for up to ``OBJECT_LAG`` seconds while the
        server says it has none (a replica behind the others)."""
        stream = f"OBJ_{objects_bucket(self.prefix)}"
        delay, deadline = 0.05, anyio.current_time() + OBJECT_LAG
        while True:
            try:
                return (await self.js.get_msg(stream, subject=chunk, direct=True)).data or b""
            except MISSING as exc:
                if anyio.current_time() + delay > deadline:
                    raise ObjectRefused(
                        f"object {name}: no chunk {chunk.rsplit('.', 1)[-1]} in {stream} "
                        f"({type(exc).__name__}): it is gone, was never stored, or the "
                        "stream allows no direct reads (run `plancast provision`)") from exc
                await anyio.sleep(delay)
                delay = min(delay * 2, RETRY_CAP)

    async def resolve(self, data: bytes, *, space: str | None = None,
                      limit: int | None = None) -> bytes:
        """The bytes of the real message, fetching it if ``data`` is an Offloaded envelope
        (``get_object``)."""
        envelope = offloaded(data)
        return data if envelope is None \
            else await self.get_object(envelope.ref, space=space, limit=limit)

    async def request(
        self, subj: str, message: Message, reply_type: type[M] | Any, *, timeout: float = 10.0
    ) -> M:
        """Request/reply with typed decoding of the answer. ``PublishRefused`` as soon as
        the server refuses the request (it is never answered then)."""
        with self.refusals.watching(subj) as refusal:
            reply = await self.nc.request(subj, encode(message), timeout=timeout)
        if refusal.cancelled_caught:
            raise PublishRefused(f"{self.refusals.who()} may not publish to {subj} (the "
                                 "server refused it: permissions violation)")
        result: M = decode(reply.data, reply_type)
        return result
