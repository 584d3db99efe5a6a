"""The scripted model server, driven by the real openai client over real HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import openai
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from openai.types.chat import ChatCompletionUserMessageParam

from runtime.testing import (
    FINGERPRINT,
    Latency,
    Rule,
    Scenario,
    ScenarioError,
    ScriptedModelServer,
    ScriptedToolCall,
    load_scenario,
    open_scripted_model_server,
)

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
PLANCAST = str(Path(sys.executable).parent / "plancast")
USER: ChatCompletionUserMessageParam = {"role": "user", "content": "hello there"}


@asynccontextmanager
async def serve(
    scenario: Scenario,
) -> AsyncIterator[tuple[ScriptedModelServer, openai.AsyncOpenAI]]:
    async with (
        open_scripted_model_server(scenario) as server,
        openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0) as client,
    ):
        yield server, client


async def ask(client: openai.AsyncOpenAI, *messages: Any, model: str = "m") -> str:
    response = await client.chat.completions.create(model=model, messages=list(messages))
    return response.choices[0].message.content or ""


async def test_text_reply_names_the_requested_model_and_itself() -> None:
    async with serve(Scenario(rules=[Rule(text="four words of text")])) as (server, client):
        raw = await client.chat.completions.with_raw_response.create(
            model="any-model", messages=[USER]
        )
        response = raw.parse()
    assert raw.headers["x-plancast-scripted"] == "1"
    assert response.model == "any-model"
    assert response.system_fingerprint == FINGERPRINT
    assert response.choices[0].message.content == "four words of text"
    assert response.choices[0].finish_reason == "stop"
    assert response.usage is not None
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (2, 4)
    assert server.requests[0].body["messages"] == [USER]


async def test_streamed_lines_come_one_per_chunk_with_the_scripted_delays() -> None:
    lines = ['{"id": 1}', '{"id": 2}', '{"id": 3}']
    latency = Latency(ttft=0.02, per_line=0.05)
    async with serve(Scenario(rules=[Rule(lines=lines, latency=latency)])) as (server, client):
        stream = await client.chat.completions.create(
            model="m", messages=[USER], stream=True, stream_options={"include_usage": True}
        )
        chunks = [chunk async for chunk in stream]
    contents = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert contents == [line + "\n" for line in lines]
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 6
    record = server.requests[0]
    assert record.delays == [0.02, 0.05, 0.05]
    assert record.sent_at == sorted(record.sent_at) and len(record.sent_at) == 3
    assert record.finished_at is not None and record.finished_at >= record.sent_at[-1]


async def test_tool_calls_stream_as_deltas_and_answer_whole() -> None:
    call = ScriptedToolCall(name="search", arguments={"query": "capital of France"}, id="c1")
    async with serve(Scenario(rules=[Rule(tool_calls=[call])])) as (_, client):
        whole = await client.chat.completions.create(model="m", messages=[USER])
        stream = await client.chat.completions.create(model="m", messages=[USER], stream=True)
        chunks = [chunk async for chunk in stream]
    message = whole.choices[0].message
    assert whole.choices[0].finish_reason == "tool_calls"
    assert message.tool_calls is not None
    assert message.tool_calls[0].id == "c1"
    deltas = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []]
    assert deltas[0].function is not None and deltas[0].function.name == "search"
    arguments = "".join(d.function.arguments or "" for d in deltas if d.function)
    assert json.loads(arguments) == {"query": "capital of France"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


async def test_rules_match_on_role_contains_tool_results_and_after() -> None:
    rules = [
        Rule(role="planner", text="planner answer"),
        Rule(tool_result_contains="42", text="tool answer"),
        Rule(any_contains="needle", text="found it"),
        Rule(model="special", text="special model"),
        Rule(after=6, text="late"),
        Rule(contains="hello", text="hi"),
    ]
    system = {"role": "system", "content": "You plan. [role:planner]"}
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    tool_turn = [
        USER,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": "the answer is 42"},
    ]
    async with serve(Scenario(rules=rules)) as (_, client):
        assert await ask(client, system, USER) == "planner answer"
        by_header = await client.chat.completions.create(
            model="m", messages=[USER], extra_headers={"x-plancast-role": "planner"}
        )
        assert by_header.choices[0].message.content == "planner answer"
        assert await ask(client, *tool_turn) == "tool answer"
        assert await ask(client, {"role": "system", "content": "needle"}, USER) == "found it"
        assert await ask(client, USER, model="special") == "special model"
        assert await ask(client, USER) == "hi"
        assert await ask(client, USER) == "late"


async def test_times_lets_a_rule_answer_n_times_then_falls_through() -> None:
    rules = [Rule(times=2, text="wrong"), Rule(text="right")]
    async with serve(Scenario(rules=rules)) as (server, client):
        answers = [await ask(client, USER) for _ in range(4)]
    assert answers == ["wrong", "wrong", "right", "right"]
    assert [r.rule for r in server.requests] == [0, 0, 1, 1]


async def test_turn_scripts_a_conversation_the_same_on_every_run() -> None:
    """A tool call on a conversation's first turn, the verdict on the next: a second run
    (the same conversation again) gets the same answers, where ``times`` was used up."""
    rules = [Rule(role="critic", turn=1, text="calling the tool"),
             Rule(role="critic", turn=2, text="verdict")]
    system = {"role": "system", "content": "[role:critic]"}
    answered = {"role": "assistant", "content": "calling the tool"}
    async with serve(Scenario(rules=rules)) as (server, client):
        for _ in range(2):
            assert await ask(client, system, USER) == "calling the tool"
            assert await ask(client, system, USER, answered, USER) == "verdict"
    assert [r.rule for r in server.requests] == [0, 1, 0, 1]


async def test_no_rule_names_the_scenario_the_role_and_a_used_up_rule(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text("[[rules]]\nname = 'once'\nrole = 'critic'\ntimes = 1\ntext = 'ok'\n")
    system = {"role": "system", "content": "[role:critic]"}
    async with serve(load_scenario(path)) as (_, client):
        assert await ask(client, system, USER) == "ok"
        with pytest.raises(openai.BadRequestError) as caught:
            await ask(client, system, USER)
    assert caught.value.code == "no_rule_matched"
    message = str(caught.value)
    assert f"no rule matched this request in scenario {path}" in message, message
    assert "role='critic'" in message and "request #1" in message and "turn 1" in message
    assert "rule 'once' matches but has answered its times = 1" in message, message


async def test_jitter_is_reproducible_from_the_seed_and_time_scale_applies() -> None:
    async def delays(seed: int, time_scale: float = 1.0) -> list[float]:
        rule = Rule(lines=["a", "b", "c"], latency=Latency(ttft=0.01, per_line=0.01))
        scenario = Scenario(
            rules=[rule], seed=seed, time_scale=time_scale, latency=Latency(jitter=0.5)
        )
        async with serve(scenario) as (server, client):
            for _ in range(2):
                await ask(client, USER)
        return [d for r in server.requests for d in r.delays]

    first = await delays(seed=7)
    assert first == await delays(seed=7)
    assert first != await delays(seed=8)
    assert len(set(first)) == len(first)  # jittered, not constant
    scaled = await delays(seed=7, time_scale=0.5)
    assert scaled == pytest.approx([d / 2 for d in first])


async def test_no_matching_rule_is_a_400_that_says_what_came_in() -> None:
    system = {"role": "system", "content": "[role:critic]"}
    async with serve(Scenario(rules=[Rule(role="planner", text="x")])) as (server, client):
        with pytest.raises(openai.BadRequestError) as caught:
            await ask(client, system, {"role": "user", "content": "Review step 3"}, model="gpt-x")
    message = str(caught.value)
    assert "no rule matched" in message
    assert "gpt-x" in message and "critic" in message and "Review step 3" in message
    assert server.requests[0].status == 400


async def test_error_rules_answer_with_their_status() -> None:
    async with serve(Scenario(rules=[Rule(error=503, error_message="overloaded")])) as (_, c):
        with pytest.raises(openai.InternalServerError, match="overloaded"):
            await ask(c, USER)


async def test_models_are_listed() -> None:
    scenario = Scenario(rules=[Rule(model="big", text="x")], models=["small"])
    async with serve(scenario) as (_, client):
        page = await client.models.list()
    assert [model.id for model in page.data] == ["small", "big"]


async def _exchange(port: int, payload: bytes) -> bytes:
    """Send raw bytes, read until the server closes (the last request says Connection: close)."""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(payload)
        received = b""
        try:
            while True:
                received += await stream.receive()
        except anyio.EndOfStream:
            return received


async def test_raw_http_keep_alive_chunked_bodies_and_bad_requests() -> None:
    body = json.dumps({"model": "m", "messages": [USER]}).encode()
    good = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )
    chunked = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    )
    bad = (
        b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 5\r\nConnection: close\r\n\r\n{oops"
    )
    async with serve(Scenario(rules=[Rule(text="ok")])) as (server, _):
        received = await _exchange(server.port, good + chunked + bad)
        missing = await _exchange(
            server.port, b"GET /v1/nothing HTTP/1.1\r\nConnection: close\r\n\r\n"
        )
        garbage = await _exchange(server.port, b"NOT HTTP\r\n\r\n")
    responses = received.split(b"HTTP/1.1 ")[1:]
    assert [r[:3] for r in responses] == [b"200", b"200", b"400"]
    assert b'"invalid_request_error"' in responses[2] and b"JSON body" in responses[2]
    assert len(server.requests) == 2
    assert missing.startswith(b"HTTP/1.1 404") and b"x-plancast-scripted: 1" in missing
    assert garbage.startswith(b"HTTP/1.1 400")


def test_scenarios_load_from_toml_and_json(tmp_path: Path) -> None:
    toml = tmp_path / "s.toml"
    toml.write_text(
        """
seed = 3
time_scale = 0.1
latency = { ttft = 0.5, jitter = 0.2 }

[[rules]]
role = "planner"
lines = ['{"id": 1}', '{"id": 2}']
latency = { per_line = 0.3 }

[[rules]]
contains = "weather"
times = 1
tool_calls = [{ name = "search", arguments = { q = "weather" } }]

[[rules]]
text = "done"
"""
    )
    scenario = load_scenario(toml)
    assert scenario.seed == 3 and scenario.latency.ttft == 0.5
    assert scenario.rules[0].lines == ['{"id": 1}', '{"id": 2}']
    assert scenario.rules[1].tool_calls is not None
    assert scenario.rules[1].tool_calls[0].arguments_json() == '{"q":"weather"}'
    as_json = tmp_path / "s.json"
    as_json.write_text(json.dumps({"rules": [{"text": "hi", "latency": {"ttft": 1}}]}))
    assert load_scenario(as_json).rules[0].latency.ttft == 1


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("[[rules]]\ncontains = 'x'\n", "give one reply"),
        ("[[rules]]\ntext = 'a'\nlines = ['b']\n", "only one reply kind"),
        ("[[rules]]\ntext = 'a'\nlatency = { tff = 1 }\n", "tff"),
        ("[[rules]]\ntext = 'a'\ntimes = 0\n", "times"),
        ("rules = [", "not valid TOML"),
        ("[[rejects]]\nconstraint = 'regex'\n", "rejection constraint must be one of"),
        ("[[rejects]]\nconstraint = 'grammar'\nstatus = 200\n", "HTTP error status"),
    ],
)
def test_bad_scenarios_say_what_is_wrong(tmp_path: Path, text: str, complaint: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=complaint):
        load_scenario(path)


async def test_runs_stand_alone_and_says_it_is_scripted(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text("[[rules]]\ntext = 'from the command line'\n")
    command = [sys.executable, "-m", "runtime.testing.scripted_model", str(path), "--port", "0"]
    async with await anyio.open_process(command, cwd=ROOT, stderr=subprocess.DEVNULL) as process:
        try:
            assert process.stdout is not None
            output = BufferedByteReceiveStream(process.stdout)
            banner = (await output.receive_until(b"\n", 1000)).decode()
            url = (await output.receive_until(b"\n", 1000)).decode().split()[-1]
            assert "SCRIPTED" in banner and "not a real model" in banner
            async with openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0) as client:
                assert await ask(client, USER) == "from the command line"
        finally:
            process.terminate()


async def test_plancast_scripted_model_prints_the_base_url_and_stops_on_sigterm(
        tmp_path: Path) -> None:
    """``plancast scripted-model`` as a child process: the team file's base_url on its
    banner, answers over HTTP, and SIGTERM ends it with exit 0."""
    path = tmp_path / "s.toml"
    path.write_text("[[rules]]\ntext = 'from plancast'\n")
    command = [PLANCAST, "scripted-model", str(path), "--port", "0"]
    async with await anyio.open_process(command, cwd=tmp_path,
                                        stderr=subprocess.DEVNULL) as process:
        assert process.stdout is not None
        output = BufferedByteReceiveStream(process.stdout)
        with anyio.fail_after(30):
            said = [(await output.receive_until(b"\n", 1000)).decode() for _ in range(3)]
        assert "SCRIPTED" in said[0] and "not a real model" in said[0], said
        url = said[1].split()[-1]
        assert f'base_url = "{url}"' in said[2], said
        async with openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0) as client:
            assert await ask(client, USER) == "from plancast"
        process.terminate()
        with anyio.fail_after(30):
            assert await process.wait() == 0


async def test_plancast_scripted_model_mistakes_are_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[[rules]]\ncontains = 'x'\n")
    good = tmp_path / "good.toml"
    good.write_text("[[rules]]\ntext = 'x'\n")
    async with open_scripted_model_server(Scenario()) as taken:
        results = [
            await anyio.run_process([PLANCAST, "scripted-model", *args], cwd=tmp_path,
                                    check=False)
            for args in ([str(bad)], [str(tmp_path / "missing.toml")],
                         [str(good), "--port", str(taken.port)])
        ]
    for result, complaint in zip(results, ["give one reply", "cannot read scenario",
                                           f"cannot listen on 127.0.0.1:{taken.port}"],
                                 strict=True):
        said = result.stderr.decode().strip()
        assert result.returncode == 2 and said.startswith("error: "), said
        assert complaint in said and len(said.splitlines()) == 1, said


async def test_rejects_answer_like_the_real_servers_and_every_constraint_is_recorded(
        tmp_path: Path) -> None:
    path = tmp_path / "server.toml"
    path.write_text("[[rules]]\ntext = 'ok'\n\n[[rejects]]\nconstraint = 'json_schema'\n"
                    "status = 500\n\n[[rejects]]\nconstraint = 'grammar'\n")
    schema_format = {"type": "json_schema", "json_schema": {"name": "a", "schema": {}}}
    async with serve(load_scenario(path)) as (server, client):
        with pytest.raises(openai.InternalServerError, match="Input should be 'text' or"):
            await client.chat.completions.create(model="m", messages=[USER],
                                                 response_format=schema_format)  # type: ignore
        with pytest.raises(openai.BadRequestError, match="Unrecognized request argument"):
            await client.chat.completions.create(model="m", messages=[USER],
                                                 extra_body={"grammar": "root ::= \"a\""})
        schema = {"type": "object"}
        answer = await client.chat.completions.create(
            model="m", messages=[USER],
            response_format={"type": "json_object", "schema": schema})  # type: ignore
        assert answer.choices[0].message.content == "ok"
        await client.chat.completions.create(
            model="m", messages=[USER], extra_body={"structured_outputs": {"json": schema}})
        assert await ask(client, USER) == "ok"
    kinds = [(r.constraint_kind, r.status) for r in server.requests]
    assert kinds == [("json_schema", 500), ("grammar", 400), ("json_object", 200),
                     ("structured_outputs", 200), (None, 200)]
    assert server.requests[1].constraint == 'root ::= "a"'
    assert server.requests[2].constraint == schema == server.requests[3].constraint
