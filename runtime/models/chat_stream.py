"""A streamed chat completion read straight from its Server-Sent Events.

The openai client still sends the request (``client.post``: base URL, key, headers,
timeouts, retries, and HTTP errors raised as ``openai.APIStatusError``; the SDK's
``AsyncStream`` it returns is never iterated, only its response read and closed). The
request is not built by ``chat.completions.create``, whose walk of the messages through
its parameter types was 0.4 of the 1.1 ms to an instant server's first line. The SDK builds
about eleven pydantic-style objects for every chunk, and a model streams one chunk per
token, which made those objects the planner's largest CPU cost. Here each ``data:``
payload is decoded by msgspec into the few fields :class:`~runtime.models.client.LineStream` uses.
Whatever goes wrong is raised as the openai exception the SDK raises for it (a broken
chunk as an ``openai.APIError`` too), so :func:`runtime.models.errors.model_error` words it.
"""

from __future__ import annotations

import logging
import ssl
import sys
from collections.abc import AsyncGenerator
from typing import Any, cast

import anyio
import msgspec
import openai

__all__ = ["ChatChunk", "ChatChunkStream", "ChunkChoice", "ChunkDelta", "ChunkUsage",
           "SseEvents", "decode_chunk"]

log = logging.getLogger(__name__)

DRAIN_SECONDS = 0.1
"""How long to read on after ``[DONE]``, so an HTTP/1.1 connection can be reused (the
SDK waits as long)."""
CLOSE_SECONDS = 5.0
"""Bound on releasing the connection, which runs even when the caller was cancelled."""


class ChunkDelta(msgspec.Struct):
    """What a chunk adds to the answer; only its text is read."""

    content: str | None = None


class ChunkChoice(msgspec.Struct):
    """One choice of a chunk (a plan asks for one)."""

    delta: ChunkDelta | None = None
    finish_reason: str | None = None
    """``stop``, ``length`` ... on the choice's last chunk; null before."""


class ChunkUsage(msgspec.Struct):
    """Token counts, sent by some servers in the stream's last chunk."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None


class ChatChunk(msgspec.Struct):
    """One ``chat.completion.chunk``; unknown fields are ignored, missing ones are null."""

    choices: list[ChunkChoice] | None = None
    usage: ChunkUsage | None = None
    error: Any = None
    """An error object a server sent instead of a chunk (mid-stream)."""


_DECODER = msgspec.json.Decoder(ChatChunk)


def decode_chunk(data: str) -> ChatChunk:
    """The chunk in one event's data; raises ``msgspec.DecodeError`` if it is not one."""
    return _DECODER.decode(data)


class SseEvents:
    """Server-Sent Events from their lines: the data of each event, once its blank line ends it.

    Comments (``: ...``), ``event:``, ``id:`` and ``retry:`` carry nothing a chat chunk
    needs and are skipped; an event cut off by the end of the body is dropped, as the SSE
    specification (and the SDK) do.
    """

    def __init__(self) -> None:
        self._data: list[str] = []

    def feed(self, line: str) -> str | None:
        """The data of the event this line ends, if it ends one that has data."""
        if not line:
            if not self._data:
                return None
            data = self._data[0] if len(self._data) == 1 else "\n".join(self._data)
            self._data = []
            return data or None  # empty data dispatches nothing (as the specification says)
        if line.startswith("data:"):
            self._data.append(line[6:] if line.startswith(" ", 5) else line[5:])
        elif line == "data":
            self._data.append("")
        return None


class ChatChunkStream:
    """The chunks of one streamed chat completion, read from its raw response.

    Made from what ``client.post(..., stream=True, stream_cls=openai.AsyncStream[Any])``
    returns; :meth:`next_chunk` until it returns None; :meth:`aclose` (idempotent)
    releases the connection.
    """

    def __init__(self, stream: openai.AsyncStream[Any]) -> None:
        self.done = False
        """Whether the server said ``[DONE]`` (else the body just ended)."""
        response = stream.response
        self._request = response.request
        self._lines = cast(AsyncGenerator[str, None], response.aiter_lines())
        self._events = SseEvents()
        self._stream = stream
        self._failures = _transport_errors(response)
        self._closed = False
        self._ahead: list[ChatChunk | None] = []
        """The first chunk (None: the end), once :meth:`first_chunk` read it ahead."""

    async def first_chunk(self) -> None:
        """Wait for the server's first chunk (or the end), kept for :meth:`next_chunk`: the
        time to it is the server's time to first token."""
        self._ahead.append(await self._read_chunk())

    async def next_chunk(self) -> ChatChunk | None:
        """The next chunk, None once the stream has ended; openai exceptions on failure."""
        if self._ahead:
            return self._ahead.pop()
        return await self._read_chunk()

    async def _read_chunk(self) -> ChatChunk | None:
        while True:
            line = await self._next_line()
            if line is None:
                return None
            data = self._events.feed(line)
            if data is None:
                continue
            if data.startswith("[DONE]"):
                self.done = True
                await self._drain()
                return None
            return self._chunk(data)

    async def aclose(self) -> None:
        """Release the connection (once; also when the caller is being cancelled)."""
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True) as scope:
            scope.deadline = anyio.current_time() + CLOSE_SECONDS
            await self._lines.aclose()
            await self._stream.close()
        if scope.cancelled_caught:
            log.warning("releasing a model server connection took over %gs; left to close "
                        "on its own", CLOSE_SECONDS)

    async def _next_line(self) -> str | None:
        try:
            return await anext(self._lines)
        except StopAsyncIteration:
            return None
        except self._failures[0] as exc:
            raise openai.APITimeoutError(request=self._request) from exc
        except self._failures[1] as exc:
            raise openai.APIConnectionError(request=self._request) from exc

    def _chunk(self, data: str) -> ChatChunk:
        try:
            chunk = decode_chunk(data)
        except msgspec.DecodeError as exc:
            raise openai.APIError(
                f"the server streamed a malformed chunk ({exc}): {data[:120]!r}; check that "
                "base_url points at an OpenAI-compatible server", self._request, body=None,
            ) from exc
        if chunk.error:
            raise openai.APIError(_error_message(chunk.error), self._request, body=chunk.error)
        return chunk

    async def _drain(self) -> None:
        with anyio.move_on_after(DRAIN_SECONDS):
            try:
                async for _ in self._lines:
                    pass
            except self._failures[1]:
                pass  # the answer is complete; a cut after it changes nothing


def _error_message(error: object) -> str:
    """The message of a mid-stream error object, as the SDK reads it."""
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) and message \
        else "An error occurred during streaming"


def _transport_errors(
    http_response: object,
) -> tuple[tuple[type[Exception], ...], tuple[type[Exception], ...]]:
    """Timeouts and other request errors of the HTTP library behind the response: httpx
    for older openai clients, httpx2 for newer ones (the SDK maps the same ones)."""
    library: Any = sys.modules[type(http_response).__module__.partition(".")[0]]
    return (library.TimeoutException,), (library.RequestError, ssl.SSLError, anyio.EndOfStream)
