"""Just enough HTTP/1.1 for an OpenAI client: keep-alive, Content-Length and chunked bodies.

A hand-written server (rather than a framework) keeps the scripted model free of
dependencies and lets it control exactly when each streamed byte leaves.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from http import HTTPStatus

import anyio
from anyio.abc import ByteStream
from anyio.streams.buffered import BufferedByteReceiveStream

from ..errors import PlancastError

MAX_HEAD = 64 * 1024
MAX_BODY = 32 * 1024 * 1024
SERVER_HEADERS = {"server": "plancast-scripted", "x-plancast-scripted": "1"}
"""Sent on every response, so nobody mistakes the scripted model for a real one."""


class HttpProtocolError(PlancastError):
    """The client sent something that is not HTTP/1.1 we can read; answer 400 and close."""


@dataclass(frozen=True)
class HttpRequest:
    method: str
    path: str
    headers: dict[str, str]
    """Header names lower-cased."""
    body: bytes

    @property
    def keep_alive(self) -> bool:
        return self.headers.get("connection", "").lower() != "close"


async def read_request(reader: BufferedByteReceiveStream) -> HttpRequest:
    """Read one request; raises anyio.IncompleteRead when the client has gone."""
    try:
        head = await reader.receive_until(b"\r\n\r\n", MAX_HEAD)
    except anyio.DelimiterNotFound as exc:
        raise HttpProtocolError("request head too large") from exc
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpProtocolError(f"bad request line {lines[0][:100]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise HttpProtocolError(f"bad header line {line[:100]!r}")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        try:
            body = await _read_chunked(reader)
        except anyio.DelimiterNotFound as exc:
            raise HttpProtocolError("bad chunked body") from exc
    else:
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError as exc:
            raise HttpProtocolError("bad content-length") from exc
        if not 0 <= length <= MAX_BODY:
            raise HttpProtocolError(f"body of {length} bytes not accepted")
        body = await reader.receive_exactly(length) if length else b""
    return HttpRequest(parts[0].upper(), parts[1].split("?", 1)[0], headers, body)


async def _read_chunked(reader: BufferedByteReceiveStream) -> bytes:
    body = bytearray()
    while True:
        size_line = await reader.receive_until(b"\r\n", 1024)
        try:
            size = int(size_line.split(b";", 1)[0], 16)
        except ValueError as exc:
            raise HttpProtocolError("bad chunk size") from exc
        if size == 0:
            while await reader.receive_until(b"\r\n", MAX_HEAD):
                pass  # trailers
            return bytes(body)
        if len(body) + size > MAX_BODY:
            raise HttpProtocolError("chunked body too large")
        body += await reader.receive_exactly(size)
        await reader.receive_exactly(2)


def _head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}"]
    lines += [f"{name}: {value}" for name, value in {**SERVER_HEADERS, **headers}.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def send_json(stream: ByteStream, status: int, obj: object, *, keep_alive: bool) -> None:
    """Send a complete JSON response with Content-Length."""
    body = json.dumps(obj).encode()
    headers = {
        "content-type": "application/json",
        "content-length": str(len(body)),
        "connection": "keep-alive" if keep_alive else "close",
    }
    await stream.send(_head(status, headers) + body)


def error_body(message: str, *, kind: str, code: str | None = None) -> dict[str, object]:
    """An error object shaped like OpenAI's, which its client turns into a readable message."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


class ChunkedSender:
    """Sends a response body in chunks as it is produced (used for Server-Sent Events)."""

    def __init__(self, stream: ByteStream) -> None:
        self._stream = stream

    async def start(self, status: int, content_type: str, *, keep_alive: bool) -> None:
        headers = {
            "content-type": content_type,
            "transfer-encoding": "chunked",
            "cache-control": "no-cache",
            "connection": "keep-alive" if keep_alive else "close",
        }
        await self._stream.send(_head(status, headers))

    async def send(self, data: bytes) -> None:
        if data:
            await self._stream.send(b"%x\r\n%s\r\n" % (len(data), data))

    async def end(self) -> None:
        await self._stream.send(b"0\r\n\r\n")
