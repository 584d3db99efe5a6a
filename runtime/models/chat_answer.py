"""A chat completion's request body as sent, and a whole (not streamed) answer read with
msgspec.

The openai client still sends the request (``client.post``: base URL, key, headers,
timeouts, retries, and HTTP errors raised as ``openai.APIStatusError``). Through
``chat.completions.create`` it also walked every message of the request through its
parameter types and built pydantic-style objects of the answer: 0.5 of the 1.2 ms one call
to an instant server cost here, on every synthesis, critic verdict and agent round.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from .chat_stream import ChunkUsage

__all__ = ["Answer", "decode_answer", "request_body"]


class AnswerFunction(msgspec.Struct):
    name: str = ""
    arguments: str = ""
    """JSON text as the model wrote it, not yet validated."""


class AnswerCall(msgspec.Struct):
    """One tool call; only ``function`` calls are taken (not the API's custom tools)."""

    id: str = ""
    type: str = "function"
    function: AnswerFunction | None = None


class AnswerMessage(msgspec.Struct):
    content: str | None = None
    tool_calls: list[AnswerCall] | None = None


class AnswerChoice(msgspec.Struct):
    message: AnswerMessage = msgspec.field(default_factory=AnswerMessage)
    finish_reason: str | None = None


class Answer(msgspec.Struct):
    """A ``chat.completion``; unknown fields are ignored, missing ones are empty."""

    choices: list[AnswerChoice] = msgspec.field(default_factory=list)
    usage: ChunkUsage | None = None
    model: str = ""


_DECODER = msgspec.json.Decoder(Answer)


def decode_answer(body: bytes) -> Answer:
    """The answer in a response body; raises ``msgspec.DecodeError`` if it is not one."""
    return _DECODER.decode(body)


def request_body(model: str, messages: Sequence[Mapping[str, Any]], *,
                 temperature: float | None, max_tokens: int | None,
                 extra: Mapping[str, Any] | None, tools: Sequence[Mapping[str, Any]] | None = None,
                 response_format: Mapping[str, Any] | None = None,
                 stream: bool = False) -> dict[str, Any]:
    """The JSON body of a request; fields left unset are not sent, and ``extra`` (the
    preset's ``extra_body`` and a constraint's fields) is merged last. A streamed one
    asks for the usage in its last chunk."""
    body: dict[str, Any] = {"model": model, "messages": list(messages), "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    if tools:
        body["tools"] = list(tools)
    if response_format:
        body["response_format"] = response_format
    if temperature is not None:
        body["temperature"] = temperature
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return {**body, **(extra or {})}
