"""The scripted model server: a real OpenAI-compatible HTTP server that answers from a scenario.

Real HTTP and real streaming, so the code under test (the openai client, our line
streaming, timeouts, retries) runs exactly as it does against a hosted model; only the
words and the delays are scripted, and reproducible from the scenario's seed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import msgspec
from anyio.abc import ByteStream, SocketAttribute
from anyio.streams.buffered import BufferedByteReceiveStream

from ..config import SCRIPTED_NO_ANSWER
from ._http import (
    ChunkedSender,
    HttpProtocolError,
    HttpRequest,
    error_body,
    read_request,
    send_json,
)
from ._scenario import (
    Latency,
    RequestView,
    Rule,
    Scenario,
    constraint_kind,
    message_text,
    no_answer,
    rule_matches,
)

FINGERPRINT = "plancast-scripted"
"""``system_fingerprint`` of every completion: the answer came from a script, not a model."""

_encoder = msgspec.json.Encoder()
PIECES_PER_WRITE = 64
"""Most streamed pieces, ready at the same moment, that go out in one write."""
_log = logging.getLogger(__name__)
_WORD = re.compile(r"\S+\s*|\s+")
_ERROR_KINDS = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error"}


@dataclass
class RecordedRequest:
    """One chat-completion request the server received, for tests to inspect.

    Times are ``time.monotonic()`` seconds, comparable with the test's own clock.
    """

    index: int
    """0-based position among this server's chat requests."""
    body: dict[str, Any]
    """The decoded JSON body."""
    headers: dict[str, str]
    """Request headers, names lower-cased, ``authorization`` redacted."""
    received_at: float
    """When the request was read."""
    rule: int | None = None
    """Index of the rule that answered, or None (no match: a 400 error)."""
    status: int = 200
    """HTTP status answered (0: none, a ``silent`` rule)."""
    delays: list[float] = field(default_factory=list)
    """The scripted delays actually used (ttft first), after jitter and time scale."""
    sent_at: list[float] = field(default_factory=list)
    """When each content chunk left the server (streaming only)."""
    finished_at: float | None = None
    """When the last byte of the response was sent."""

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def constraint_kind(self) -> str | None:
        """``grammar``, ``json_schema``, ``json_object``, ``structured_outputs`` or None."""
        return constraint_kind(self.body)

    @property
    def constraint(self) -> Any:
        """The constraint as sent: the grammar text, the JSON schema, or None."""
        body = self.body
        match self.constraint_kind:
            case "grammar":
                return body["grammar"]
            case "structured_outputs":
                outputs = body["structured_outputs"]
                return outputs.get("grammar") or outputs.get("json") \
                    if isinstance(outputs, dict) else outputs
            case "json_schema":
                return (body["response_format"].get("json_schema") or {}).get("schema")
            case "json_object":
                return body["response_format"].get("schema")
        return None


def count_words(text: str) -> int:
    """The scripted model's token count: whitespace-separated words, an approximation."""
    return len(text.split())


class ScriptedModelServer:
    """Answers OpenAI chat-completion requests from a :class:`Scenario`.

    Create it with :func:`open_scripted_model_server`, which binds the port and serves.
    """

    def __init__(
        self,
        scenario: Scenario,
        *,
        time_scale: float | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.scenario = scenario
        self.time_scale = scenario.time_scale if time_scale is None else time_scale
        """Multiplier of every delay (the scenario's unless overridden)."""
        self.requests: list[RecordedRequest] = []
        """Every chat-completion request received, in arrival order."""
        self.host = "127.0.0.1"
        self.port = 0
        self._log = log
        self._uses = [0] * len(scenario.rules)
        self._rng = random.Random(scenario.seed)

    @property
    def base_url(self) -> str:
        """The URL to give an OpenAI client, e.g. ``http://127.0.0.1:PORT/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    # -- connections --------------------------------------------------------------------

    async def serve_connection(self, stream: ByteStream) -> None:
        """Serve requests on one keep-alive connection until the client closes it."""
        async with stream:
            reader = BufferedByteReceiveStream(stream)
            try:
                while True:
                    try:
                        request = await read_request(reader)
                    except HttpProtocolError as exc:
                        body = error_body(
                            f"malformed HTTP request: {exc}", kind="invalid_request_error"
                        )
                        await send_json(stream, 400, body, keep_alive=False)
                        return
                    await self._dispatch(stream, request)
                    if not request.keep_alive:
                        return
            except (anyio.IncompleteRead, anyio.BrokenResourceError, anyio.ClosedResourceError):
                return  # the client went away; nothing to answer
            except Exception:
                _log.exception("scripted model server: unexpected error; closing connection")

    async def _dispatch(self, stream: ByteStream, request: HttpRequest) -> None:
        path = request.path.removeprefix("/v1")
        if path == "/chat/completions" and request.method == "POST":
            await self._chat(stream, request)
        elif path == "/models" and request.method == "GET":
            await send_json(stream, 200, self._models(), keep_alive=request.keep_alive)
        else:
            message = f"the scripted model has no {request.method} {request.path}"
            body = error_body(message, kind="invalid_request_error", code="unknown_url")
            await send_json(stream, 404, body, keep_alive=request.keep_alive)

    def _models(self) -> dict[str, Any]:
        names = dict.fromkeys(
            [*self.scenario.models, *(r.model for r in self.scenario.rules if r.model)]
        )
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": FINGERPRINT}
            for name in names or ["scripted"]
        ]
        return {"object": "list", "data": data}

    # -- chat completions ---------------------------------------------------------------

    async def _chat(self, stream: ByteStream, request: HttpRequest) -> None:
        received = time.monotonic()
        keep = request.keep_alive

        async def reject(message: str, code: str | None = None) -> None:
            body = error_body(message, kind="invalid_request_error", code=code)
            await send_json(stream, 400, body, keep_alive=keep)

        try:
            body = json.loads(request.body)
        except ValueError:
            await reject(
                "We could not parse the JSON body of your request. (HINT: This likely means"
                " you aren't using your HTTP library correctly.)"
            )
            return
        problem = _body_problem(body)
        if problem:
            await reject(problem)
            return
        headers = {
            k: "<redacted>" if k == "authorization" else v for k, v in request.headers.items()
        }
        record = RecordedRequest(
            index=len(self.requests), body=body, headers=headers, received_at=received
        )
        self.requests.append(record)
        view = RequestView(body, request.headers, record.index)
        refused = [r for r in self.scenario.rejects if r.constraint == record.constraint_kind]
        if refused:
            record.status = refused[0].status
            kind = _ERROR_KINDS.get(record.status, "server_error")
            await send_json(stream, record.status, error_body(refused[0].text(), kind=kind),
                            keep_alive=keep)
            record.finished_at = time.monotonic()
            return
        found = self._match(view)
        if found is None:
            record.status = 400
            if self._log:
                self._log(f"#{record.index} NO MATCH {view.describe()}")
            used_up = [rule for n, rule in enumerate(self.scenario.rules)
                       if rule.times is not None and self._uses[n] >= rule.times
                       and rule_matches(rule, view)]
            await reject(no_answer(self.scenario, view, used_up), code=SCRIPTED_NO_ANSWER)
            record.finished_at = time.monotonic()
            return
        record.rule = found
        rule = self.scenario.rules[found]
        latency = rule.latency.over(self.scenario.latency)
        pieces = _pieces(rule, latency, record.index)
        record.delays = [self._delay(raw, latency) for raw, _ in pieces]
        if self._log:
            self._log(f"#{record.index} {view.describe()} -> rule #{found} {rule.name or ''}")
        if rule.silent:
            record.status = 0
            await _until_hung_up(stream)
            return
        if rule.error is not None:
            record.status = rule.error
            await anyio.sleep(record.delays[0])
            kind = _ERROR_KINDS.get(rule.error, "server_error" if rule.error >= 500 else "requests")
            await send_json(
                stream, rule.error, error_body(rule.error_message, kind=kind), keep_alive=keep
            )
        elif record.stream:
            await self._send_stream(stream, record, rule, [delta for _, delta in pieces], keep)
        else:
            await anyio.sleep(sum(record.delays))
            await send_json(stream, 200, _completion(record, rule), keep_alive=keep)
        record.finished_at = time.monotonic()

    def _match(self, view: RequestView) -> int | None:
        for index, rule in enumerate(self.scenario.rules):
            if rule.times is not None and self._uses[index] >= rule.times:
                continue
            if rule_matches(rule, view):
                self._uses[index] += 1
                return index
        return None

    def _delay(self, raw: float, latency: Latency) -> float:
        if raw <= 0:
            return 0.0
        if latency.jitter:
            raw *= self._rng.lognormvariate(0.0, latency.jitter)
        return raw * self.time_scale

    async def _send_stream(
        self,
        stream: ByteStream,
        record: RecordedRequest,
        rule: Rule,
        deltas: list[dict[str, Any]],
        keep_alive: bool,
    ) -> None:
        options = record.body.get("stream_options") or {}
        include_usage = isinstance(options, dict) and bool(options.get("include_usage")) \
            and self.scenario.stream_usage
        sender = ChunkedSender(stream)
        await sender.start(200, "text/event-stream; charset=utf-8", keep_alive=keep_alive)
        envelope = _envelope(record, "chat.completion.chunk")
        if include_usage:
            envelope["usage"] = None

        def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            return b"data: " + _encoder.encode({**envelope, "choices": choices, **extra}) + b"\n\n"

        # Pieces with no delay between them are ready together and go out a few dozen to a
        # write (the first at once): a piece, a write and a loop turn each made an instant
        # 1,000-line plan cost this process more CPU than the planner reading it, on the
        # same cores.
        ready: list[bytes] = []
        for delay, delta in zip(record.delays, deltas, strict=True):
            if delay > 0:
                await self._flush(sender, record, ready)
                await anyio.sleep(delay)
            ready.append(event([{"index": 0, "delta": delta, "finish_reason": None}]))
            if len(ready) >= PIECES_PER_WRITE or not record.sent_at:
                await self._flush(sender, record, ready)
        await self._flush(sender, record, ready)
        done = {"index": 0, "delta": {}, "finish_reason": _finish_reason(rule)}
        tail = [event([done])]
        if include_usage:
            tail.append(event([], usage=_usage(record, rule)))
        await sender.send(b"".join([*tail, b"data: [DONE]\n\n"]))
        await sender.end()

    @staticmethod
    async def _flush(sender: ChunkedSender, record: RecordedRequest, ready: list[bytes]) -> None:
        """Send the pieces that are ready, noting when each went out."""
        if ready:
            await sender.send(b"".join(ready))
            record.sent_at.extend([time.monotonic()] * len(ready))
            ready.clear()


async def _until_hung_up(stream: ByteStream) -> None:
    """Read (and drop) whatever comes until the client closes the connection."""
    with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError,
                             anyio.ClosedResourceError, OSError):
        while True:
            await stream.receive()
    raise anyio.BrokenResourceError  # nothing more is served on this connection


def _body_problem(body: object) -> str | None:
    if not isinstance(body, dict):
        return "The request body must be a JSON object."
    if not isinstance(body.get("model"), str):
        return "you must provide a model parameter"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty array of message objects"
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        return "every item of 'messages' must be an object with a 'role'"
    return None


def _pieces(rule: Rule, latency: Latency, index: int) -> list[tuple[float, dict[str, Any]]]:
    """The streamed deltas of a reply, each with its raw delay before it (ttft first)."""
    ttft = latency.ttft or 0.0
    tps = latency.tokens_per_second
    pieces: list[tuple[float, dict[str, Any]]] = []

    def add(delay: float, delta: dict[str, Any]) -> None:
        pieces.append((ttft if not pieces else delay, delta))

    def pace(text: str) -> float:
        return count_words(text) / tps if tps else 0.0

    if rule.error is not None:
        return [(ttft, {})]
    if rule.lines is not None:
        for line in rule.lines:
            gap = latency.per_line if latency.per_line is not None else pace(line)
            add(gap, {"content": line + "\n"})
    elif rule.text is not None:
        words = _WORD.findall(rule.text) if tps else [rule.text]
        for word in words or [""]:
            add(pace(word), {"content": word})
    for n, call in enumerate(rule.tool_calls or []):
        head = {
            "index": n,
            "id": call.id or f"call_{index}_{n}",
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        add(pace(call.name), {"tool_calls": [head]})
        arguments = call.arguments_json()
        half = len(arguments) // 2
        for part in (arguments[:half], arguments[half:]):
            if part:
                fragment = {"index": n, "function": {"arguments": part}}
                add(pace(part), {"tool_calls": [fragment]})
    if not pieces:
        pieces.append((ttft, {}))
    pieces[0][1]["role"] = "assistant"
    return pieces


def _envelope(record: RecordedRequest, obj: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-scripted-{record.index}",
        "object": obj,
        "created": int(time.time()),
        "model": record.body["model"],
        "system_fingerprint": FINGERPRINT,
    }


def _finish_reason(rule: Rule) -> str:
    return rule.finish_reason or ("tool_calls" if rule.tool_calls else "stop")


def _usage(record: RecordedRequest, rule: Rule) -> dict[str, int]:
    prompt = sum(count_words(message_text(m)) for m in record.body["messages"])
    completion = count_words(rule.content or "") + sum(
        count_words(c.name) + count_words(c.arguments_json()) for c in rule.tool_calls or []
    )
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _completion(record: RecordedRequest, rule: Rule) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": rule.content, "refusal": None}
    if rule.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id or f"call_{record.index}_{n}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json()},
            }
            for n, call in enumerate(rule.tool_calls)
        ]
    finish = _finish_reason(rule)
    choice = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
    return {
        **_envelope(record, "chat.completion"),
        "choices": [choice],
        "usage": _usage(record, rule),
    }


@contextlib.asynccontextmanager
async def open_scripted_model_server(
    scenario: Scenario,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    time_scale: float | None = None,
    log: Callable[[str], None] | None = None,
) -> AsyncIterator[ScriptedModelServer]:
    """Serve ``scenario`` on ``host:port`` (0: a free port) until the block exits.

    ``time_scale`` overrides the scenario's; ``log`` gets one line per chat request.
    """
    server = ScriptedModelServer(scenario, time_scale=time_scale, log=log)
    listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
    server.host = host
    server.port = listener.extra(SocketAttribute.local_port)
    failure: Exception | None = None
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, server.serve_connection)
        try:
            yield server
        except Exception as exc:
            failure = exc  # re-raised below, outside the task group, so it stays unwrapped
        finally:
            tg.cancel_scope.cancel()
    if failure is not None:
        raise failure
