"""What the scripted model says and how fast: a scenario of ordered rules.

A scenario is data, so the demo, the tests and the benchmarks can share one file format
(TOML or JSON) and still build scenarios in code. The first rule that matches a request
answers it, and a rule answers every request it matches, so one server answers run after
run. ``turn`` tells the calls of one conversation apart (a tool call, then the verdict);
``times`` lets a rule answer only N times over the server's life, so a scenario can script
"first answer wrong, second right".
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any

import msgspec

from ..config import ROLE_HEADER
from ..errors import PlancastError

_ROLE_MARKER = re.compile(r"\[role:([A-Za-z0-9_.-]+)\]")


class Latency(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How slowly a reply is produced; unset fields fall back to the scenario's defaults."""

    ttft: float | None = None
    """Seconds before the first token (default 0)."""
    tokens_per_second: float | None = None
    """Pace of text and tool-call arguments (whitespace words); unset means all at once."""
    per_line: float | None = None
    """Seconds between streamed ``lines``; unset derives it from ``tokens_per_second``."""
    jitter: float | None = None
    """Sigma of a lognormal factor (median 1) applied to every delay; 0 means exact delays."""

    def __post_init__(self) -> None:
        for name in ("ttft", "tokens_per_second", "per_line", "jitter"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"latency {name} must be >= 0, got {value}")

    def over(self, default: Latency) -> Latency:
        """This latency with unset fields taken from ``default``."""
        return Latency(
            **{
                name: getattr(default, name) if getattr(self, name) is None else getattr(self, name)
                for name in ("ttft", "tokens_per_second", "per_line", "jitter")
            }
        )


class ScriptedToolCall(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One tool call the scripted model makes."""

    name: str
    """Function name."""
    arguments: dict[str, Any] | str = {}
    """JSON arguments: a table/object (encoded for you) or an already-encoded string."""
    id: str | None = None
    """Tool call id; defaults to ``call_<request>_<n>``."""

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, separators=(",", ":"))


class Rule(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """When to answer (all set matchers must hold) and what to answer (one reply kind)."""

    name: str | None = None
    """A label for error messages and the request log."""
    # -- matchers --
    model: str | None = None
    """The request's ``model``, exactly."""
    role: str | None = None
    """The caller's role: ``[role:NAME]`` in a system message, or the x-plancast-role header."""
    contains: str | None = None
    """Substring of the last user message."""
    any_contains: str | None = None
    """Substring of any message."""
    tool_result_contains: str | None = None
    """Substring of a tool result at the end of the conversation (the turn after a tool call)."""
    after: int | None = None
    """Match only chat requests whose 0-based index on this server is at least this."""
    turn: int | None = None
    """The request's turn in its conversation: 1 for its first call, N for the call after
    N-1 answers of the model (assistant messages). Unlike ``times``, it holds every run."""
    times: int | None = None
    """Answer at most this many requests over the server's life (not per run), then let
    later rules answer; unset: every request it matches."""
    # -- replies --
    text: str | None = None
    """Answer with this text (streamed word by word)."""
    lines: list[str] | None = None
    """Answer with these lines, newline-terminated, one line per streamed chunk (JSONL)."""
    tool_calls: list[ScriptedToolCall] | None = None
    """Call these tools (finish_reason "tool_calls"); may be combined with ``text``."""
    error: int | None = None
    """Answer with this HTTP error status instead."""
    error_message: str = "scripted error"
    """Message of the ``error`` reply."""
    silent: bool | None = None
    """True: take the request and never answer, not even with headers, until the client
    hangs up (a server that hung)."""
    finish_reason: str | None = None
    """Override the finish reason (e.g. "length" to script a truncated answer)."""
    latency: Latency = Latency()
    """Latency of this rule's replies, over the scenario's default."""

    def __post_init__(self) -> None:
        replies = ("text", "lines", "tool_calls", "error", "silent")
        kinds = [k for k in replies if getattr(self, k) is not None]
        if not kinds:
            raise ValueError(f"{self.label()}: give one reply: text, lines, tool_calls, error "
                             "or silent")
        if len(kinds) > 1 and set(kinds) != {"text", "tool_calls"}:
            raise ValueError(f"{self.label()}: only one reply kind allowed, got {kinds}")
        if self.error is not None and not 400 <= self.error <= 599:
            raise ValueError(f"{self.label()}: error must be an HTTP status 400..599")
        if self.times is not None and self.times < 1:
            raise ValueError(f"{self.label()}: times must be >= 1")
        if self.turn is not None and self.turn < 1:
            raise ValueError(f"{self.label()}: turn must be >= 1")

    def label(self) -> str:
        return f"rule {self.name!r}" if self.name else "rule"

    @property
    def content(self) -> str | None:
        """The text content of the reply (lines joined, each newline-terminated)."""
        if self.lines is not None:
            return "".join(f"{line}\n" for line in self.lines)
        return self.text


CONSTRAINT_KINDS = ("grammar", "json_schema", "json_object", "structured_outputs")
"""How a request can constrain the answer: a ``grammar`` field, a ``response_format`` of
type ``json_schema`` or ``json_object``, vLLM's ``structured_outputs``."""

_REFUSALS = {
    "grammar": "Unrecognized request argument supplied: grammar",
    "structured_outputs": "Unrecognized request argument supplied: structured_outputs",
    "json_schema": "[{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
                   "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}]",
    "json_object": "'response_format.type' must be 'json_schema'",
}


class Rejection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The server does not speak one way of constraining answers, and says so as real servers
    do: OpenAI answers 400 to a ``grammar``; llama-cpp-python 500 to a ``json_schema``."""

    constraint: str
    """One of ``grammar``, ``json_schema``, ``json_object``, ``structured_outputs``."""
    status: int = 400
    """The HTTP status of the refusal."""
    message: str = ""
    """The error message; empty uses what the real server says."""

    def __post_init__(self) -> None:
        if self.constraint not in CONSTRAINT_KINDS:
            raise ValueError(f"rejection constraint must be one of {CONSTRAINT_KINDS}")
        if not 400 <= self.status <= 599:
            raise ValueError("rejection status must be an HTTP error status 400..599")

    def text(self) -> str:
        return self.message or _REFUSALS[self.constraint]


def constraint_kind(body: dict[str, Any]) -> str | None:
    """How a request body constrains the answer (one of ``CONSTRAINT_KINDS``), or None."""
    if "grammar" in body:
        return "grammar"
    if "structured_outputs" in body:
        return "structured_outputs"
    form = body.get("response_format")
    kind = form.get("type") if isinstance(form, dict) else None
    return kind if kind in ("json_schema", "json_object") else None


class Scenario(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The whole script of a scripted model server."""

    rules: list[Rule] = []
    """Tried in order; the first that matches (and has uses left) answers."""
    latency: Latency = Latency()
    """Default latency of every rule."""
    seed: int = 0
    """Seed of the jitter; same seed and same requests give the same delays."""
    time_scale: float = 1.0
    """Multiplies every delay (benchmarks scale down, demos may scale up)."""
    models: list[str] = []
    """Extra model ids listed by GET /v1/models (rules' ``model`` values are listed too)."""
    stream_usage: bool = True
    """Send usage at the end of a stream when the client asks (``include_usage``); false
    plays a server that never does (llama.cpp's server)."""
    rejects: list[Rejection] = []
    """Constraints this server refuses (answered with an error before any rule is tried)."""
    name: str = ""
    """What error messages call the scenario; ``load_scenario`` sets it to the file's path."""

    def label(self) -> str:
        return f"scenario {self.name}" if self.name else "the scenario"


def load_scenario(path: str | os.PathLike[str]) -> Scenario:
    """Read a scenario from a ``.toml`` or ``.json`` file."""
    file = Path(path)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise ScenarioError(f"cannot read scenario {file}: {exc}") from exc
    scenario = parse_scenario(raw, fmt="json" if file.suffix == ".json" else "toml",
                              source=str(file))
    return scenario if scenario.name else msgspec.structs.replace(scenario, name=str(file))


def parse_scenario(data: bytes | str, *, fmt: str = "toml", source: str = "<scenario>") -> Scenario:
    """Parse scenario text; errors name the source and the offending field."""
    text = data.decode() if isinstance(data, bytes) else data
    try:
        obj: object = tomllib.loads(text) if fmt == "toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{source} is not valid {fmt.upper()}: {exc}") from exc
    try:
        return msgspec.convert(obj, Scenario)
    except msgspec.ValidationError as exc:
        raise ScenarioError(f"{source}: {exc}") from exc


# -- matching ---------------------------------------------------------------------------


def message_text(message: object) -> str:
    """The text of a chat message whose content is a string or a list of parts."""
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


class RequestView:
    """The parts of a chat request the rules look at, extracted once."""

    def __init__(self, body: dict[str, Any], headers: dict[str, str], index: int) -> None:
        messages = [m for m in body.get("messages", []) if isinstance(m, dict)]
        self.index = index
        self.model = str(body.get("model", ""))
        self.role = headers.get(ROLE_HEADER) or _role_from_system(messages)
        users = [m for m in messages if m.get("role") == "user"]
        self.last_user = message_text(users[-1]) if users else ""
        self.all_text = [message_text(m) for m in messages]
        trailing_tools: list[str] = []
        for message in reversed(messages):
            if message.get("role") != "tool":
                break
            trailing_tools.append(message_text(message))
        self.tool_results = trailing_tools
        self.turn = 1 + sum(1 for m in messages if m.get("role") == "assistant")

    def describe(self) -> str:
        return (
            f"model={self.model!r}, role={self.role!r}, request #{self.index}, "
            f"turn {self.turn}, last user message {_excerpt(self.last_user)!r}"
            + (f", {len(self.tool_results)} trailing tool result(s)" if self.tool_results else "")
        )


def _excerpt(text: str, head: int = 50, tail: int = 90) -> str:
    """The text on one line, its middle left out when long: prompts open with boilerplate
    and end with what the request is about (a step's instruction, say)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= head + tail else f"{flat[:head]} ... {flat[-tail:]}"


def _role_from_system(messages: list[dict[str, Any]]) -> str | None:
    for message in messages:
        if message.get("role") in ("system", "developer"):
            found = _ROLE_MARKER.search(message_text(message))
            if found:
                return found.group(1)
    return None


def rule_matches(rule: Rule, request: RequestView) -> bool:
    """Whether every matcher the rule sets holds for the request (``times`` aside)."""
    return (
        (rule.model is None or rule.model == request.model)
        and (rule.role is None or rule.role == request.role)
        and (rule.contains is None or rule.contains in request.last_user)
        and (rule.any_contains is None or any(rule.any_contains in t for t in request.all_text))
        and (
            rule.tool_result_contains is None
            or any(rule.tool_result_contains in t for t in request.tool_results)
        )
        and (rule.after is None or request.index >= rule.after)
        and (rule.turn is None or request.turn == rule.turn)
    )


def no_answer(scenario: Scenario, request: RequestView, used_up: list[Rule]) -> str:
    """Why nothing answered a request, in one line: the request and what to add."""
    spent = "".join(
        f"; {rule.label()} matches but has answered its times = {rule.times} "
        "(times count over the server's life, not per run: use turn or contains instead)"
        for rule in used_up
    )
    return (f"scripted model: no rule matched this request in {scenario.label()} "
            f"({request.describe()}){spent}. Add a rule that matches it (role, contains, "
            "turn ...)")


class ScenarioError(PlancastError):
    """A scripted-model scenario file or object is invalid; the message names the field."""
