"""nats-py's JetStream context as plancast uses it on every message it stores: cheaper
acknowledgements (a counter names each one's reply subject; msgspec reads it), a server's
error answer set on the publish's future, and batches of acknowledgements awaited under
one deadline."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
from nats.js import api
from nats.js.client import JetStreamContext
from nats.js.errors import APIError, NoStreamResponseError

ACK_WAIT = 3.0
"""Seconds to wait for an asynchronous publish's acknowledgement before storing it again
(an acknowledgement lost with a dying server never arrives)."""


class JetStream(JetStreamContext):
    """nats-py's JetStream context, with a server's error answer to an asynchronous publish
    set on its future (nats-py raises it inside the reply callback instead, so the future
    never completes and its publisher waits for nothing), and a cheaper reply token."""

    _tokens = 0
    _async_reply_token_at = 0
    _reply_prefix = ""

    async def publish_async(
        self, subject: str, payload: bytes = b"", wait_stall: float | None = None,
        stream: str | None = None, headers: dict[str, str] | None = None,
        msg_ttl: float | None = None,
    ) -> asyncio.Future[api.PubAck]:
        """nats-py's, naming each acknowledgement's reply subject by a counter instead of a
        NUID plus random bytes (two of a publish's larger costs): the reply prefix is
        already unique to this connection."""
        if stream is not None or msg_ttl is not None or wait_stall is not None:
            return await super().publish_async(subject, payload, wait_stall, stream, headers,
                                               msg_ttl)
        if not self._async_reply_prefix:
            await self._init_async_reply()
        window = self._publish_async_pending_semaphore
        if window.locked():  # as many unacknowledged as nats-py allows: wait for room
            await window.acquire()
        else:
            window._value -= 1  # what acquire() does when there is room, without a coroutine
        self._tokens += 1
        token = f"{self._tokens:x}"
        future: asyncio.Future[api.PubAck] = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda _: self._async_done(token))
        self._publish_async_futures[token] = future
        if self._publish_async_completed_event.is_set():
            self._publish_async_completed_event.clear()
        await self._nc.publish(subject, payload, reply=self._reply_prefix + token,
                               headers=headers)
        return future

    async def _init_async_reply(self) -> None:
        """nats-py's, with acknowledgements read in the connection's read loop."""
        self._publish_async_futures = {}
        prefix = self._nc._inbox_prefix[:]
        prefix.extend(b"." + self._nc._nuid.next() + b".")
        self._async_reply_prefix = prefix
        self._async_reply_token_at = len(prefix)
        self._reply_prefix = prefix.decode()
        await subscribe_direct(self._nc, prefix.decode() + "*", self._take_async_reply)

    def _async_done(self, token: str) -> None:
        self._publish_async_futures.pop(token, None)
        if not self._publish_async_futures:
            self._publish_async_completed_event.set()
        self._publish_async_pending_semaphore.release()

    async def _handle_async_reply(self, msg: Any) -> None:
        self._take_async_reply(msg)

    def _take_async_reply(self, msg: Any) -> None:
        future = self._publish_async_futures.get(msg.subject[self._async_reply_token_at:])
        if future is None or future.done():
            return
        try:
            if not msg.data:
                raise NoStreamResponseError
            ack = _ACK.decode(msg.data)
            if ack.error is not None:
                APIError.from_error(ack.error)  # raises the error's own type
            future.set_result(api.PubAck(stream=ack.stream, seq=ack.seq, domain=ack.domain,
                                         duplicate=ack.duplicate))
        except msgspec.DecodeError as exc:
            future.set_exception(NoStreamResponseError(description=f"unreadable ack: {exc}"))
        except Exception as exc:
            future.set_exception(exc)


async def subscribe_direct(nc: Any, subject: str, handler: Callable[[Any], None]) -> Any:
    """Subscribe with ``handler`` called as each message is read (plancast's client), or
    through nats-py's callback (another client)."""
    direct = getattr(nc, "subscribe_direct", None)
    if direct is not None:
        return await direct(subject, handler)

    async def callback(msg: Any) -> None:
        handler(msg)
    return await nc.subscribe(subject, cb=callback)


class _Ack(msgspec.Struct):
    """The fields of a JetStream publish acknowledgement plancast reads (nats-py's own
    reading goes through dataclass introspection, for every message sent)."""

    stream: str = ""
    seq: int = 0
    domain: str | None = None
    duplicate: bool | None = None
    error: dict[str, Any] | None = None


_ACK = msgspec.json.Decoder(_Ack)


async def acknowledged(futures: Sequence[asyncio.Future[Any] | None]) -> None:
    """Wait, ``ACK_WAIT`` seconds at most for all of them together, until these publish
    acknowledgements are in (or failed); one timer for the lot, not one per message.

    Never by awaiting a future itself: another task settling the same message may give
    up on it and cancel it (``outcome``), and awaiting a cancelled future would cancel
    this task, whatever it was in the middle of (a run's timer failing a step once let a
    late result of the attempt through that way)."""
    waiting = [f for f in futures if f is not None and not f.done()]
    if waiting:
        await asyncio.wait(waiting, timeout=ACK_WAIT)


def outcome(future: asyncio.Future[Any] | None) -> Any:
    """An acknowledgement ``acknowledged`` waited for: its value, or the error it failed
    with (``TimeoutError`` if it never came, which also frees its slot in nats-py's
    window of pending publishes)."""
    if future is None or future.cancelled():
        raise TimeoutError("no acknowledgement")
    if not future.done():
        future.cancel()
        raise TimeoutError(f"no acknowledgement within {ACK_WAIT:g}s")
    return future.result()
