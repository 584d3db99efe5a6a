"""Model calls through the official openai client, against any OpenAI-compatible server.

One :class:`ModelClient` per :class:`ModelSettings` (each role names its own model; there
are no hidden defaults). Every call reports its token usage and cost, and every failure
becomes a :class:`~runtime.errors.ModelError` that says what to check. The planner uses
:meth:`ModelClient.stream_lines` to hand JSONL plan lines to the scheduler while the model
is still writing the rest of the plan (:mod:`runtime.models.line_stream`; the streamed body is
read by :mod:`runtime.models.chat_stream`, not by the SDK's per-chunk models).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar

import anyio
import msgspec
import openai

from protocols import Usage

from ..config import ROLE_HEADER, ModelSettings
from .chat_answer import decode_answer, request_body
from .chat_stream import ChatChunkStream
from .errors import ModelError, StructuredOutputUnsupported
from .failures import model_error, silent_server
from .line_stream import LineStream, split_lines
from .retries import Calls, backoff, retryable
from .structured import Constraint
from .token_estimate import estimate_messages, estimate_text

__all__ = [
    "ChatMessage",
    "Completion",
    "LineStream",
    "ModelClient",
    "ToolCall",
    "model_error",
    "split_lines",
]

ChatMessage = Mapping[str, Any]
"""A chat message as the OpenAI API takes it, e.g. ``{"role": "user", "content": "..."}``."""

class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """A function call the model asked for."""

    id: str
    """Id to send back with the tool's result (``tool_call_id``)."""
    name: str
    """Function name."""
    arguments: str
    """Arguments as the model wrote them: JSON text, not yet validated."""


class Completion(msgspec.Struct, frozen=True, kw_only=True):
    """The answer of one non-streamed model call."""

    text: str
    """The message content ("" when the model only called tools)."""
    tool_calls: list[ToolCall]
    """Tool calls, in the model's order."""
    usage: Usage
    """Tokens and cost of this call."""
    model: str
    """Model name as the server reported it."""
    finish_reason: str
    """``stop``, ``length``, ``tool_calls`` ..."""


_T = TypeVar("_T")


class _TokenCounts(Protocol):
    """Token counts as a server reports them (whole responses, or a stream's last chunk)."""

    @property
    def prompt_tokens(self) -> int | None: ...
    @property
    def completion_tokens(self) -> int | None: ...




class ModelClient:
    """An ``openai.AsyncOpenAI`` for one model; use ``async with`` so its connections close."""

    def __init__(self, settings: ModelSettings, *, role: str | None = None,
                 default_max_tokens: int | None = None) -> None:
        self.settings = settings
        self.role = role
        """The calling role, sent as the ``x-plancast-role`` header (for routing and logs)."""
        self.max_tokens = settings.max_tokens or default_max_tokens
        """Cap on each call's completion tokens: the preset's, else the role kind's default."""
        self.total_usage = Usage()
        """Usage of every call made through this client so far."""
        self._client = openai.AsyncOpenAI(
            api_key=settings.api_key(),
            base_url=settings.base_url,
            timeout=settings.timeout,
            max_retries=0,  # plancast retries itself: not what cannot change (.retries)
            default_headers={ROLE_HEADER: role} if role else None,
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._client.close()

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        response_format: Mapping[str, Any] | None = None,
        constraint: Constraint | None = None,
    ) -> Completion:
        """One model call, answered in full; ``tools`` and ``response_format`` as in the API,
        ``constraint`` in the dialect of the preset's server."""
        s = self.settings
        body = request_body(s.model, messages, tools=tools, response_format=response_format,
                            temperature=s.temperature, max_tokens=self.max_tokens,
                            extra=_body(s, constraint))
        requests = Calls()
        try:
            raw = await self._send(lambda: self._client.post(
                "/chat/completions", cast_to=bytes, body=body), constraint, requests)
        except (ModelError, StructuredOutputUnsupported) as exc:
            exc.usage = self._record_failed(requests.sent)  # the run counts them too
            raise
        except BaseException:
            self._record_failed(requests.sent)
            raise
        where = f"model {s.model!r} at {s.effective_base_url()}"
        try:
            response = decode_answer(raw)
        except msgspec.DecodeError as exc:
            raise ModelError(f"{where} answered with something that is not a chat completion "
                             f"({exc}): {raw[:120]!r}; check that base_url points at an "
                             "OpenAI-compatible server") from exc
        if not response.choices:
            raise ModelError(f"{where} returned no choices")
        choice = response.choices[0]
        calls = [
            ToolCall(id=call.id, name=call.function.name, arguments=call.function.arguments)
            for call in choice.message.tool_calls or []
            if call.type == "function" and call.function is not None
        ]
        text = choice.message.content or ""
        usage = self._record(response.usage, messages, text + _calls_text(calls), tools) \
            + self._record_failed(requests.sent - 1)  # the retries it took count too
        return Completion(
            text=text,
            tool_calls=calls,
            usage=usage,
            model=response.model,
            finish_reason=choice.finish_reason or "",
        )

    def stream_lines(self, messages: Sequence[ChatMessage], *,
                     constraint: Constraint | None = None) -> LineStream:
        """Stream a completion as lines, each yielded as soon as its newline arrives.

        ``async with client.stream_lines(messages) as lines: async for line in lines``;
        after the last line ``lines.usage`` holds the call's usage. With a constraint
        framed as ``steps`` (a JSON-Schema dialect), each "line" is one element of the
        answer's ``steps`` array, yielded as soon as it closes (an answer without any
        array, from a server that ignored the schema, is read as lines at its end).
        """
        return LineStream(partial(self._open_stream, messages, constraint),
                          partial(self._record_stream, messages), self.settings, constraint)

    def _record(self, reported: _TokenCounts | None, messages: Sequence[ChatMessage],
                text: str, tools: Sequence[Mapping[str, Any]] | None = None) -> Usage:
        """Count one call: as the server reported it, else estimated here (never 0)."""
        prompt, completion = (reported.prompt_tokens or 0, reported.completion_tokens or 0) \
            if reported is not None else (0, 0)
        if prompt + completion:
            usage = self.settings.usage(prompt, completion)
        else:
            prompt = estimate_messages(messages) + (
                estimate_text(msgspec.json.encode(list(tools)).decode()) if tools else 0)
            usage = self.settings.usage(prompt, estimate_text(text), estimated=True)
        self.total_usage += usage
        return usage

    def _record_failed(self, sent: int) -> Usage:
        """Count requests that got no answer: calls made, tokens unknown (none counted)."""
        usage = Usage(calls=sent)
        self.total_usage += usage
        return usage

    def _record_stream(self, messages: Sequence[ChatMessage], reported: _TokenCounts | None,
                       text: str, calls: Calls, opened: bool) -> Usage:
        """Count a streamed call: the stream that was read, and every request before it
        that failed (all of them if none was answered)."""
        failed = self._record_failed(calls.sent - opened)
        return failed + self._record(reported, messages, text) if opened else failed

    async def _send(self, send: Callable[[], Awaitable[_T]], constraint: Constraint | None,
                    calls: Calls) -> _T:
        """Send a request, again while its error may pass (``.retries``), at most
        ``max_retries`` more times; each one sent is counted in ``calls``."""
        s = self.settings
        retry = 0
        while True:
            calls.sent += 1
            try:
                return await send()
            except openai.OpenAIError as exc:
                error = model_error(exc, s, constraint)
                if retry >= s.max_retries or not retryable(exc, error):
                    raise error from exc
                await anyio.sleep(backoff(retry, exc))
                retry += 1

    async def _open_stream(
        self, messages: Sequence[ChatMessage], constraint: Constraint | None, calls: Calls
    ) -> ChatChunkStream:
        """Send a streamed request and wait for its first chunk, within the preset's
        ``first_byte_timeout`` (a server that sends nothing is not asked again); its body
        is read by :class:`ChatChunkStream`, not the SDK (whose per-chunk models cost the
        planner more CPU than the rest of a step)."""
        s = self.settings
        body = request_body(s.model, messages, temperature=s.temperature,
                            max_tokens=self.max_tokens, extra=_body(s, constraint), stream=True)

        async def send() -> ChatChunkStream:
            with anyio.move_on_after(s.first_byte_timeout):
                stream = ChatChunkStream(await self._client.post(
                    "/chat/completions", cast_to=object, body=body, stream=True,
                    stream_cls=openai.AsyncStream[Any]))
                try:
                    await stream.first_chunk()
                except BaseException:
                    await stream.aclose()
                    raise
                return stream
            raise silent_server(s)

        return await self._send(send, constraint, calls)


def _calls_text(calls: Sequence[ToolCall]) -> str:
    """The tool calls as the model wrote them (for a token estimate)."""
    return "".join(f" {c.name} {c.arguments}" for c in calls)


def _body(settings: ModelSettings, constraint: Constraint | None) -> dict[str, Any] | None:
    """The preset's ``extra_body`` with the constraint's fields."""
    return {**settings.extra_body, **(constraint.body if constraint else {})} or None
