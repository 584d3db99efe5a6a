"""Streamed answers as a server really writes them, byte for byte: a tiny HTTP server in
the test sends raw Server-Sent Events (odd splits, CRLF, comments, errors, cuts) to the
real openai client and our chunk reader. Every case ends in lines or a clear ModelError."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import pytest
from anyio.abc import SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from runtime.config import ModelSettings
from runtime.models import LineStream, ModelClient, ModelError, SseEvents, decode_chunk
from runtime.testing import read_request as read_http_request

from .test_llm import UNSET_KEY, USER

pytestmark = pytest.mark.anyio

BOUND = 20.0
"""No case may take longer than this (it fails rather than hangs)."""
Ending = Literal["done", "cut", "hold"]


@dataclass
class RawServer:
    """Answers every request with the same raw SSE body, sent piece by piece."""

    pieces: Sequence[bytes]
    ending: Ending = "done"
    """``done``: end the chunked body; ``cut``: close mid-body; ``hold``: stall until the
    client goes."""
    requests: int = 0
    gone: anyio.Event = field(default_factory=anyio.Event)
    """Set when a client closed its connection."""

    async def serve(self, stream: SocketStream) -> None:
        async with stream:
            await read_request(stream)
            self.requests += 1
            await stream.send(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                              b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n")
            for piece in self.pieces:
                await stream.send(b"%x\r\n%s\r\n" % (len(piece), piece))
                await anyio.sleep(0.002)  # separate reads, so splits reach the client
            if self.ending == "done":
                await stream.send(b"0\r\n\r\n")
            elif self.ending == "hold":
                try:
                    await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    pass
            self.gone.set()


async def read_request(stream: SocketStream) -> bytes:
    """The body of the request a test server reads, read as the scripted model reads it."""
    return (await read_http_request(BufferedByteReceiveStream(stream))).body


@asynccontextmanager
async def serve_raw(server: RawServer) -> AsyncIterator[str]:
    """Serve ``server`` on a free port; yields its base URL (``http://127.0.0.1:N/v1``)."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, server.serve)
        yield f"http://127.0.0.1:{port}/v1"
        tg.cancel_scope.cancel()


@asynccontextmanager
async def sse_model(server: RawServer, timeout: float = 30.0) -> AsyncIterator[ModelClient]:
    with anyio.fail_after(BOUND):
        async with serve_raw(server) as base_url:
            settings = ModelSettings(model="m", base_url=base_url, api_key_env=UNSET_KEY,
                                     max_retries=0, timeout=timeout)
            async with ModelClient(settings) as client:
                yield client


def event(content: str | None = None, finish: str | None = None, **extra: Any) -> bytes:
    choice = {"index": 0, "delta": {"content": content}, "finish_reason": finish}
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [choice], **extra}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
PLAN = [event('{"id": 1, "tool": "sé'), event('arch"}\n{"id": 2'), event("}\n"),
        event(finish="stop"), event(choices=[], usage=USAGE), b"data: [DONE]\n\n"]
"""Two lines over three chunks (one with a non-ASCII letter), usage only in the last."""


def split_every(body: bytes, size: int) -> list[bytes]:
    return [body[i:i + size] for i in range(0, len(body), size)]


async def read(client: ModelClient) -> tuple[list[str], LineStream]:
    stream = client.stream_lines([USER])
    async with stream:
        lines = [line async for line in stream]
    return lines, stream


@pytest.mark.parametrize("size", [1, 7, 64, 10_000])
async def test_chunks_split_at_any_byte_give_the_same_lines(size: int) -> None:
    server = RawServer(split_every(b"".join(PLAN), size))
    async with sse_model(server) as client:
        lines, stream = await read(client)
    assert lines == ['{"id": 1, "tool": "séarch"}', '{"id": 2}']
    assert stream.text == '{"id": 1, "tool": "séarch"}\n{"id": 2}\n'
    assert stream.finish_reason == "stop"
    assert stream.usage is not None and not stream.usage.estimated
    assert (stream.usage.prompt_tokens, stream.usage.completion_tokens) == (11, 7)
    assert client.total_usage.calls == 1


@pytest.mark.parametrize("finish", ["stop", "length"])
async def test_one_character_per_chunk_gives_the_same_lines(finish: str) -> None:
    text = 'one\r\ntwo\n\n{"id": 3}'
    body = [*(event(char) for char in text), event(finish=finish), b"data: [DONE]\n\n"]
    async with sse_model(RawServer(body)) as client:
        lines, stream = await read(client)
    cut = finish == "length"  # the last line was cut by max_tokens: no line
    assert lines == ["one", "two", "", *([] if cut else ['{"id": 3}'])]
    assert stream.text == text and stream.finish_reason == finish


async def test_without_usage_the_call_is_estimated() -> None:
    body = [event("alpha beta\n"), event("gamma", finish="stop", usage=None),
            b"data: [DONE]\n\n"]
    async with sse_model(RawServer(body)) as client:
        lines, stream = await read(client)
    assert lines == ["alpha beta", "gamma"]
    assert stream.usage is not None and stream.usage.estimated
    assert stream.usage.completion_tokens >= 3 and stream.usage.prompt_tokens > 0


async def test_null_and_missing_fields_and_empty_choices_are_tolerated() -> None:
    body = [b'data: {"choices": [{"delta": null, "finish_reason": null}]}\n\n',
            b'data: {"choices": null, "usage": null}\n\n',
            b'data: {"choices": []}\n\n',
            b'data: {"choices": [{}]}\n\n',
            b'data: {"choices": [{"delta": {"role": "assistant"}}], "unknown": [1, {}]}\n\n',
            b'data: {"choices": [{"delta": {"content": "a\\nb"}}, {"delta": {"content": "x"}}]}'
            b"\n\n",
            b'data: {"choices": [{"delta": {}, "finish_reason": "stop"}], '
            b'"usage": {"prompt_tokens": null, "completion_tokens": 2}}\n\n',
            b"data: [DONE]\n\n"]
    async with sse_model(RawServer(body)) as client:
        lines, stream = await read(client)
    assert lines == ["a", "b"]  # only the first choice is read
    assert stream.usage is not None and not stream.usage.estimated
    assert (stream.usage.prompt_tokens, stream.usage.completion_tokens) == (0, 2)


@pytest.mark.parametrize("newline", [b"\r\n", b"\r"])
async def test_crlf_and_cr_line_endings(newline: bytes) -> None:
    body = [piece.replace(b"\n\n", newline * 2) for piece in PLAN]
    async with sse_model(RawServer(body)) as client:
        lines, stream = await read(client)
    assert lines == ['{"id": 1, "tool": "séarch"}', '{"id": 2}']
    assert stream.usage is not None and stream.usage.prompt_tokens == 11


async def test_comments_event_names_ids_and_multiline_data() -> None:
    body = [b": OPENROUTER PROCESSING\n\n",
            b"event: ping\n\n",  # an event without data is no chunk
            b"retry: 3000\nid: 7\nevent: message\n" + event("one\n"),
            b'data: {"choices": [{"delta":\ndata:{"content": "two\\n"}}]}\n\n',
            b"data\n\n",  # an empty data field: an empty event, skipped
            event(finish="stop"), b"data: [DONE]\n\n"]
    async with sse_model(RawServer(body)) as client:
        lines, _ = await read(client)
    assert lines == ["one", "two"]


async def test_an_error_object_mid_stream_is_a_model_error_with_its_message() -> None:
    error = {"error": {"message": "the GPU fell over", "type": "server_error"}}
    body = [event("first\n"), b"data: " + json.dumps(error).encode() + b"\n\n",
            event("never\n")]
    async with sse_model(RawServer(body)) as client:
        stream = client.stream_lines([USER])
        got: list[str] = []
        with pytest.raises(ModelError) as caught:
            async with stream:
                async for line in stream:
                    got.append(line)
    assert got == ["first"]
    message = str(caught.value)
    assert "the GPU fell over" in message and "'m' at http://127.0.0.1" in message
    assert "\n" not in message
    assert stream.usage is not None and stream.usage.estimated
    assert client.total_usage.calls == 1


async def test_an_error_event_without_a_message_still_says_what_happened() -> None:
    body = [b'event: error\ndata: {"error": "overloaded"}\n\n']
    async with sse_model(RawServer(body)) as client:
        with pytest.raises(ModelError, match="An error occurred during streaming"):
            await read(client)


@pytest.mark.parametrize("data", [
    b"data: this is not json\n\n",
    b'data: {"choices": [{"delta": {"content": \n\n',  # cut JSON
    b'data: {"choices": "all of them"}\n\n',
    b'data: {"choices": [{"delta": {"content": 42}}]}\n\n',
    b'data: {"usage": {"prompt_tokens": "eleven"}}\n\n',
    b"data: [1, 2, 3]\n\n",
])
async def test_a_malformed_chunk_is_a_model_error_naming_it(data: bytes) -> None:
    async with sse_model(RawServer([event("ok\n"), data, event("after\n")])) as client:
        stream = client.stream_lines([USER])
        with pytest.raises(ModelError) as caught:
            async with stream:
                assert await anext(stream) == "ok"
                await anext(stream)
    message = str(caught.value)
    assert "malformed chunk" in message and "OpenAI-compatible" in message
    assert "\n" not in message and caught.value.status_code is None
    assert client.total_usage.calls == 1


async def test_a_body_ending_without_done_ends_the_lines() -> None:
    body = [event("one\n"), event("two", finish="stop"),
            b'data: {"choices": [{"delta": {"content": "lost"}}]}\n']  # event never ended
    async with sse_model(RawServer(body)) as client:
        lines, stream = await read(client)
    assert lines == ["one", "two"] and stream.finish_reason == "stop"
    assert stream.usage is not None and stream.usage.estimated


async def test_a_connection_cut_mid_stream_is_a_model_error() -> None:
    async with sse_model(RawServer([event("one\n"), event("tw")], ending="cut")) as client:
        stream = client.stream_lines([USER])
        got: list[str] = []
        with pytest.raises(ModelError, match=r"'m' at http://127\.0\.0\.1"):
            async with stream:
                async for line in stream:
                    got.append(line)
    assert got == ["one"]
    assert stream.text == "one\ntw" and client.total_usage.calls == 1


async def test_a_server_that_stalls_mid_stream_times_out() -> None:
    server = RawServer([event("one\n")], ending="hold")
    async with sse_model(server, timeout=0.5) as client:
        with pytest.raises(ModelError, match=r"did not answer within 0\.5s"):
            await read(client)
        await server.gone.wait()  # the connection was released


async def test_a_server_that_keeps_the_body_open_after_done_still_ends() -> None:
    server = RawServer([event("one", finish="stop"), b"data: [DONE]\n\n"], ending="hold")
    async with sse_model(server) as client:
        lines, stream = await read(client)
        await server.gone.wait()
    assert lines == ["one"] and stream.finish_reason == "stop"


async def test_a_cancelled_stream_is_counted_once_and_releases_its_connection() -> None:
    server = RawServer([event("one\n"), event("tw")], ending="hold")
    async with sse_model(server) as client:
        stream = client.stream_lines([USER])
        got: list[str] = []
        with anyio.move_on_after(0.5) as scope:
            async with stream:
                async for line in stream:
                    got.append(line)
        assert scope.cancelled_caught and got == ["one"]
        await server.gone.wait()
        await stream.aclose()  # a second close changes nothing
    assert stream.usage is not None and stream.usage.estimated
    assert client.total_usage.calls == 1 and client.total_usage == stream.usage


def test_sse_events_follow_the_specification() -> None:
    events = SseEvents()
    lines = [": comment", "event: x", "data: a", "data:b", "data:  c", "", "", "id: 1",
             "data: [DONE]", ""]
    assert [d for d in map(events.feed, lines) if d is not None] == ["a\nb\n c", "[DONE]"]


def test_decode_chunk_keeps_only_what_the_stream_uses() -> None:
    chunk = decode_chunk('{"choices": [{"index": 0, "delta": {"content": "x", "tool_calls":'
                         ' []}, "logprobs": null, "finish_reason": "length"}], "usage": {'
                         '"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3,'
                         ' "prompt_tokens_details": {"cached_tokens": 0}}, "error": null}')
    assert chunk.choices is not None and chunk.choices[0].finish_reason == "length"
    assert chunk.choices[0].delta is not None and chunk.choices[0].delta.content == "x"
    assert chunk.usage is not None and chunk.usage.total_tokens == 3 and not chunk.error
