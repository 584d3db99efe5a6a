"""The model client against the scripted model server: real openai client, real HTTP."""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.config import ModelConfigError, ModelSettings
from runtime.models import ModelClient, ModelError, split_lines
from runtime.testing import (
    Latency,
    Rule,
    Scenario,
    ScriptedModelServer,
    ScriptedToolCall,
    open_scripted_model_server,
)

pytestmark = pytest.mark.anyio

UNSET_KEY = "PLANCAST_TEST_UNSET_API_KEY"
USER = {"role": "user", "content": "What is the capital of France?"}


@asynccontextmanager
async def model(
    scenario: Scenario, **settings: Any
) -> AsyncIterator[tuple[ScriptedModelServer, ModelClient]]:
    async with open_scripted_model_server(scenario) as server:
        options: dict[str, Any] = {"max_retries": 0, "api_key_env": UNSET_KEY, **settings}
        async with ModelClient(ModelSettings(base_url=server.base_url, **options)) as client:
            yield server, client


async def test_complete_returns_text_usage_and_cost() -> None:
    scenario = Scenario(rules=[Rule(text="Paris is the capital")])
    prices = {"prompt_price_per_mtok": 2.0, "completion_price_per_mtok": 10.0}
    async with model(scenario, model="cheap", temperature=0.0, **prices) as (server, client):
        completion = await client.complete([USER])
    assert completion.text == "Paris is the capital"
    assert completion.model == "cheap" and completion.finish_reason == "stop"
    assert completion.tool_calls == []
    usage = completion.usage
    assert (usage.calls, usage.prompt_tokens, usage.completion_tokens) == (1, 6, 4)
    assert usage.cost_usd == pytest.approx((6 * 2.0 + 4 * 10.0) / 1e6)
    assert client.total_usage == usage
    assert server.requests[0].body["temperature"] == 0.0


async def test_stream_lines_yields_each_line_while_the_model_is_still_writing() -> None:
    plan = ['{"id": 1, "tool": "search"}', '{"id": 2, "tool": "search"}', '{"id": 3}']
    rule = Rule(role="planner", lines=plan, latency=Latency(ttft=0.01, per_line=0.1))
    system = {"role": "system", "content": "You write plans. [role:planner]"}
    async with model(Scenario(rules=[rule]), model="planner-model") as (server, client):
        received: list[tuple[str, float]] = []
        async with client.stream_lines([system, USER]) as lines:
            assert lines.usage is None
            async for line in lines:
                received.append((line, time.monotonic()))
    assert [line for line, _ in received] == plan
    record = server.requests[0]
    assert record.body["stream_options"] == {"include_usage": True}
    assert record.finished_at is not None
    # The first line was in the caller's hands before the server had sent the last one.
    assert received[0][1] < record.sent_at[-1] <= record.finished_at
    for (_, got_at), sent_at in zip(received, record.sent_at, strict=True):
        assert got_at >= sent_at
    assert lines.usage is not None and lines.usage.completion_tokens == 10
    assert lines.finish_reason == "stop"
    assert lines.text == "".join(f"{line}\n" for line in plan)


async def test_stream_lines_joins_lines_split_across_chunks() -> None:
    # Word-by-word streaming splits lines over several chunks; the last has no newline.
    rule = Rule(text="one two\nthree four\r\n\nfive six", latency=Latency(tokens_per_second=1e4))
    async with model(Scenario(rules=[rule]), model="m") as (server, client):
        lines = [line async for line in client.stream_lines([USER])]
    assert lines == ["one two", "three four", "", "five six"]
    assert len(server.requests[0].sent_at) == 6


async def test_a_line_cut_by_max_tokens_is_not_yielded() -> None:
    """The model stopped mid-line at its max_tokens: the cut line is no line (a plan would
    report it as malformed JSON instead of naming max_tokens)."""
    rule = Rule(text='{"id": 1}\n{"id": 2, "ro', finish_reason="length")
    async with model(Scenario(rules=[rule]), model="m") as (_, client):
        stream = client.stream_lines([USER])
        lines = [line async for line in stream]
    assert lines == ['{"id": 1}'] and stream.finish_reason == "length"
    assert stream.text.endswith('"ro')


async def test_stream_lines_can_stop_early() -> None:
    rule = Rule(lines=["a", "b", "c"], latency=Latency(per_line=0.05))
    async with model(Scenario(rules=[rule]), model="m") as (_, client):
        async with client.stream_lines([USER]) as lines:
            async for line in lines:
                assert line == "a"
                break
        # Closed before the server's usage came: counted all the same, by an estimate.
        assert lines.usage is not None and lines.usage.estimated
        assert lines.usage.calls == 1 and lines.usage.completion_tokens >= 1
        assert lines.usage.prompt_tokens > 0
        assert (await client.complete([USER])).text == "a\nb\nc\n"
        assert client.total_usage.calls == 2


async def test_a_stream_without_usage_is_estimated_never_zero() -> None:
    """llama.cpp's server sends no usage in streams: the call is estimated, and says so."""
    plan = ['{"id": 1, "tool": "search", "args": {"q": "capital of France"}}', '{"id": 2}']
    scenario = Scenario(rules=[Rule(lines=plan)], stream_usage=False)
    async with model(scenario, model="m") as (server, client):
        stream = client.stream_lines([USER])
        lines = [line async for line in stream]
    assert lines == plan and server.requests[0].body["stream_options"]["include_usage"]
    usage = stream.usage
    assert usage is not None and usage.estimated and usage.calls == 1
    assert 20 <= usage.completion_tokens <= 40  # 28 runs of letters, digits and symbols
    assert 6 <= usage.prompt_tokens <= 20  # 7 words and a message's template
    assert client.total_usage == usage


async def test_max_tokens_is_the_presets_else_the_role_kinds_default() -> None:
    scenario = Scenario(rules=[Rule(text="ok")])
    async with open_scripted_model_server(scenario) as server:
        base = {"model": "m", "base_url": server.base_url, "api_key_env": UNSET_KEY}
        async with ModelClient(ModelSettings(**base), default_max_tokens=300) as client:
            await client.complete([USER])
            [line async for line in client.stream_lines([USER])]
        own = ModelSettings(**base, max_tokens=77)
        async with ModelClient(own, default_max_tokens=300) as client:
            await client.complete([USER])
        async with ModelClient(ModelSettings(**base)) as client:
            await client.complete([USER])
    sent = [r.body.get("max_tokens") for r in server.requests]
    assert sent == [300, 300, 77, None]


async def test_tool_call_round_trip() -> None:
    call = ScriptedToolCall(name="search", arguments={"query": "capital of France"})
    rules = [
        Rule(tool_result_contains="Paris", text="The capital of France is Paris."),
        Rule(contains="capital", tool_calls=[call]),
    ]
    tools = [
        {
            "type": "function",
            "function": {
                "name": "search",
                "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
            },
        }
    ]
    async with model(Scenario(rules=rules), model="m") as (server, client):
        first = await client.complete([USER], tools=tools)
        assert first.finish_reason == "tool_calls" and first.text == ""
        [tool_call] = first.tool_calls
        assert tool_call.name == "search"
        assert tool_call.arguments == '{"query":"capital of France"}'
        assistant = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": tool_call.id,
                    "type": "function",
                    "function": {"name": tool_call.name, "arguments": tool_call.arguments},
                }
            ],
        }
        result = {"role": "tool", "tool_call_id": tool_call.id, "content": "Paris (pop. 2.1M)"}
        second = await client.complete([USER, assistant, result], tools=tools)
    assert second.text == "The capital of France is Paris."
    assert server.requests[0].body["tools"] == tools
    assert client.total_usage.calls == 2


async def test_first_answer_wrong_then_right() -> None:
    rules = [Rule(times=1, text="Lyon"), Rule(text="Paris")]
    async with model(Scenario(rules=rules), model="m") as (_, client):
        assert (await client.complete([USER])).text == "Lyon"
        assert (await client.complete([USER])).text == "Paris"


async def test_response_format_is_sent() -> None:
    schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    async with model(Scenario(rules=[Rule(text="{}")]), model="m") as (server, client):
        await client.complete([USER], response_format=schema)
    assert server.requests[0].body["response_format"] == schema


async def test_no_matching_rule_is_a_model_error_that_names_the_request() -> None:
    scenario = Scenario(rules=[Rule(role="planner", text="x")])
    async with model(scenario, model="exec-model") as (_, client):
        with pytest.raises(ModelError) as caught:
            await client.complete([{"role": "system", "content": "[role:coder]"}, USER])
        with pytest.raises(ModelError, match="no rule matched"):
            async for _ in client.stream_lines([USER]):
                pass
    message = str(caught.value)
    assert caught.value.status_code == 400
    assert "no rule matched" in message and "exec-model" in message and "coder" in message
    assert "What is the capital" in message


async def test_server_error_is_a_model_error() -> None:
    scenario = Scenario(rules=[Rule(error=500, error_message="scripted crash")])
    async with model(scenario, model="m") as (_, client):
        with pytest.raises(ModelError, match="scripted crash") as caught:
            await client.complete([USER])
    assert caught.value.status_code == 500
    assert "HTTP 500" in str(caught.value)


async def test_unreachable_server_is_a_model_error_naming_the_url() -> None:
    async with open_scripted_model_server(Scenario()) as server:
        url = server.base_url
    settings = ModelSettings(model="m", base_url=url, api_key_env=UNSET_KEY, max_retries=0)
    async with ModelClient(settings) as client:
        with pytest.raises(ModelError, match="cannot reach") as caught:
            await client.complete([USER])
    assert url in str(caught.value) and caught.value.status_code is None


def test_missing_key_for_a_remote_server_names_the_env_var(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(UNSET_KEY, raising=False)
    remote = ModelSettings(
        model="m", base_url="https://models.example.com/v1", api_key_env=UNSET_KEY
    )
    with pytest.raises(ModelConfigError, match=UNSET_KEY):
        ModelClient(remote)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ModelConfigError, match=UNSET_KEY):
        ModelSettings(model="m", api_key_env=UNSET_KEY).api_key()
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:8000/v1")
    assert ModelSettings(model="m", api_key_env=UNSET_KEY).api_key()  # local: placeholder
    monkeypatch.setenv(UNSET_KEY, "sk-test")
    assert remote.api_key() == "sk-test"


def test_settings_need_a_model_and_reject_unknown_fields() -> None:
    with pytest.raises(ValueError, match="model"):
        ModelSettings()  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="temprature"):
        ModelSettings(model="m", temprature=0.1)  # type: ignore[call-arg]


@given(text=st.text(alphabet="ab\n\r", max_size=40), cuts=st.lists(st.integers(0, 40)))
def test_split_lines_is_independent_of_chunking(text: str, cuts: list[int]) -> None:
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    lines: list[str] = []
    partial = ""
    for start, end in itertools.pairwise(bounds):
        done, partial = split_lines(partial, text[start:end])
        lines.extend(done)
    expected = text.split("\n")
    assert lines == [line.removesuffix("\r") for line in expected[:-1]]
    assert partial == expected[-1]
