"""plancast's NATS client: nats-py's, with what it does for every message made cheaper.

Published in one event-loop turn goes out in one socket write; a publish's header block is
built as one string; and a ``subscribe_direct`` subscription hands its messages to their
handler in the read loop, headers read only when asked for. What it reads and writes on
the wire is nats-py's own (``tests/runtime/test_client_wire.py``).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import BadHeaderError, BadSubjectError


class PlancastClient(NatsClient):
    """nats-py's client, writing what was published in one event-loop turn with one
    socket write: its flusher waits for the turn to end before it writes (each write wakes
    the server, and costs a syscall here and there); and handing the messages of a
    ``subscribe_direct`` subscription to their handler as they are read."""

    def __init__(self) -> None:
        super().__init__()
        self._direct: dict[int, Callable[[Msg], None]] = {}

    async def subscribe_direct(self, subject: str, handler: Callable[[Msg], None]) -> Any:
        """Subscribe with ``handler`` called in the read loop itself, for each message as it
        is read: no queue and no task in between (nats-py's callbacks have both, a loop
        turn per message). For handlers that only file a message away (a publish
        acknowledgement, a pulled task), so they must not block. A message's headers
        are parsed now only if they carry a status; else ``msg.headers`` is None and the
        raw block is ``msg.raw_headers`` (``delivery.headers`` parses it)."""
        sub = await self.subscribe(subject)
        self._direct[sub._id] = handler
        return sub

    def _remove_sub(self, sid: int, max_msgs: int = 0) -> None:
        self._direct.pop(sid, None)
        super()._remove_sub(sid, max_msgs)

    async def _send_publish(self, subject: str, reply: str, payload: bytes, payload_size: int,
                            headers: dict[str, Any] | None) -> None:
        """nats-py's, with the header block built as one string: its byte-by-byte building
        made a publish with three headers cost three times one without."""
        if not subject:
            raise BadSubjectError
        if headers is None:
            command = f"PUB {subject} {reply} {payload_size}\r\n".encode()
        else:
            block = header_block(headers)
            command = f"HPUB {subject} {reply} {len(block)} {len(block) + payload_size}" \
                      "\r\n".encode() + block
        self.stats["out_msgs"] += 1
        self.stats["out_bytes"] += payload_size
        await self._send_command(command + payload + b"\r\n")
        if self._flush_queue is not None and self._flush_queue.empty():
            await self._flush_pending()

    def write_now(self) -> None:
        """Write what is pending at once, not when the event-loop turn ends: for a message
        that must not wait behind the rest of a long turn (nothing is written while
        disconnected: the flusher sends it after the reconnect, as before)."""
        if self._pending_data_size and self._transport is not None and self.is_connected:
            self._write_pending()

    def _write_pending(self) -> None:
        assert self._transport is not None
        self._transport.writelines(self._pending)
        self._pending = []
        self._pending_data_size = 0

    def _build_message(self, sid: int, subject: bytes, reply: bytes, data: bytes,
                       headers: dict[str, str] | None) -> Any:
        """nats-py's, stamped with the connection that read it (``received_on``): a reply
        is allowed on that connection only, and a message may wait in a queue across a
        reconnect before anyone looks at it."""
        msg = super()._build_message(sid, subject, reply, data, headers)
        msg.received_on = int(self.stats["reconnects"])
        return msg

    async def _process_msg(self, sid: int, subject: bytes, reply: bytes, data: bytes,
                           headers: bytes) -> None:
        handler = self._direct.get(sid)
        if handler is None:
            await super()._process_msg(sid, subject, reply, data, headers)
            return
        if headers and headers[STATUS_AT:STATUS_AT + 1] == b" ":  # a status: read it now
            handler(self._build_message(sid, subject, reply, data,
                                        await self._process_headers(headers)))
            return
        msg = self._build_message(sid, subject, reply, data, None)
        if headers:  # read when asked for (``Delivery.headers``): most never are
            msg.raw_headers = headers
        handler(msg)

    async def _flusher(self) -> None:
        assert self._transport, "Client.connect must be called first"
        assert self._flush_queue, "Client.connect must be called first"
        while True:
            if not self.is_connected or self.is_connecting:
                break
            future: asyncio.Future[Any] = await self._flush_queue.get()
            try:
                await asyncio.sleep(0)  # the rest of this turn's publishes join this write
                if self._pending_data_size > 0:
                    self._write_pending()
                    await self._transport.drain()  # type: ignore[no-untyped-call]
            except OSError as e:
                await self._error_cb(e)
                await self._process_op_err(e)
                break
            except (asyncio.CancelledError, RuntimeError, AttributeError):
                break  # the loop is closing, or the connection was torn down
            finally:
                if not future.done():  # it may have been cancelled (nats-py issue 624)
                    future.set_result(None)

STATUS_AT = len(b"NATS/1.0")
"""Where a header block has a space if it starts with an inline status."""
_HEADER_KEY = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_NEWLINES = str.maketrans({"\r": " ", "\n": " "})
_good_keys: set[str] = set()


def header_block(headers: dict[str, Any]) -> bytes:
    """NATS headers as sent on the wire, with nats-py's rules: keys are tokens (checked once
    per key), values trimmed with CR and LF turned into spaces, empty keys skipped. Keys
    and values are ``str`` (a ``str`` enum, such as nats-py's ``Header``, by its value)."""
    lines = ["NATS/1.0\r\n"]
    for name, value in headers.items():
        key = name.strip()  # also a plain str of an enum member's value
        if key not in _good_keys:
            if not key:
                continue
            if not _HEADER_KEY.fullmatch(key):
                raise BadHeaderError(key)
            _good_keys.add(key)
        text = value.strip()
        if "\r" in text or "\n" in text:
            text = text.translate(_NEWLINES)
        lines.append(f"{key}: {text}\r\n")
    lines.append("\r\n")
    return "".join(lines).encode()
