"""Whole (not streamed) answers as a server really writes them: a tiny HTTP server in the
test sends a raw JSON body to the real openai client and our answer reader, and keeps the
request it got. Every case ends in a Completion or a clear one-line ModelError."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from anyio.abc import SocketStream

from runtime.config import ModelSettings
from runtime.models import ModelClient, ModelError

from .test_llm import UNSET_KEY, USER
from .test_llm_sse import BOUND, read_request, serve_raw

pytestmark = pytest.mark.anyio


@dataclass
class JsonServer:
    """Answers every request with the same raw body; keeps the bodies it was sent."""

    body: bytes
    received: list[Any] = field(default_factory=list)

    async def serve(self, stream: SocketStream) -> None:
        async with stream:
            self.received.append(json.loads(await read_request(stream)))
            await stream.send(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                              b"content-length: %d\r\nconnection: close\r\n\r\n%s"
                              % (len(self.body), self.body))


@asynccontextmanager
async def answering(body: bytes | dict[str, Any], **settings: Any,
                    ) -> AsyncIterator[tuple[JsonServer, ModelClient]]:
    server = JsonServer(body if isinstance(body, bytes) else json.dumps(body).encode())
    with anyio.fail_after(BOUND):
        async with serve_raw(server) as base_url:
            options = {"max_retries": 0, "api_key_env": UNSET_KEY, **settings}
            async with ModelClient(ModelSettings(model="m", base_url=base_url,
                                                 **options)) as client:
                yield server, client


def completion(message: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"id": "c1", "object": "chat.completion", "created": 1, "model": "m-2024",
            "choices": [{"index": 0, "message": {"role": "assistant", **message},
                         "finish_reason": "tool_calls"}], **extra}


async def test_function_calls_are_read_and_other_tool_kinds_left_out() -> None:
    calls = [{"id": "a", "type": "function",
              "function": {"name": "search", "arguments": '{"q": "Paris"}'}},
             {"id": "b", "type": "custom", "custom": {"name": "grep", "input": "x"}}]
    usage = {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}
    async with answering(completion({"content": None, "tool_calls": calls},
                                    usage=usage)) as (_, client):
        answer = await client.complete([USER])
    assert [(c.id, c.name, c.arguments) for c in answer.tool_calls] == \
        [("a", "search", '{"q": "Paris"}')]
    assert (answer.text, answer.model, answer.finish_reason) == ("", "m-2024", "tool_calls")
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (12, 5)
    assert not answer.usage.estimated


async def test_the_request_carries_what_was_set_and_nothing_unset() -> None:
    tools = [{"type": "function", "function": {"name": "search", "parameters": {}}}]
    async with answering(completion({"content": "Paris"}), max_tokens=50,
                         extra_body={"top_k": 4}) as (server, client):
        answer = await client.complete([USER], tools=tools)
    assert answer.text == "Paris"
    assert answer.usage.estimated and answer.usage.prompt_tokens > 0  # none reported
    assert server.received == [{"model": "m", "messages": [USER], "stream": False,
                                "tools": tools, "max_tokens": 50, "top_k": 4}]


@pytest.mark.parametrize("body", [
    b"this is not json",
    b'{"choices": [{"message": {"content": ',  # cut
    b'{"choices": "all of them"}',
    b'{"choices": [{"message": {"content": 42}}]}',
    b'{"usage": {"prompt_tokens": "eleven"}, "choices": []}',
    b"[1, 2, 3]",
])
async def test_a_body_that_is_not_a_completion_is_a_model_error_naming_it(body: bytes) -> None:
    async with answering(body) as (_, client):
        with pytest.raises(ModelError) as caught:
            await client.complete([USER])
    message = str(caught.value)
    assert "not a chat completion" in message and "OpenAI-compatible" in message
    assert "'m' at http://127.0.0.1" in message and "\n" not in message


async def test_an_answer_without_choices_says_so() -> None:
    async with answering({"id": "c1", "object": "chat.completion", "choices": []}) \
            as (_, client):
        with pytest.raises(ModelError, match="returned no choices"):
            await client.complete([USER])
