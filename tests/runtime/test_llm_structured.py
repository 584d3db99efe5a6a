"""Constrained requests through the real openai client: what is sent, how a steps answer
streams, and a server that refuses the dialect."""

from __future__ import annotations

import time

import msgspec
import pytest

from runtime.config import ModelSettings
from runtime.models import (
    Constraint,
    ModelError,
    PlanShape,
    RoleTools,
    StructuredOutputUnsupported,
    answer_constraint,
    plan_constraint,
)
from runtime.testing import Latency, Rejection, Rule, Scenario

from .test_llm import USER, model

pytestmark = pytest.mark.anyio



class Answer(msgspec.Struct):
    approved: bool
    note: str = ""


SHAPE = PlanShape(first_id=1, prior=(), roles=(RoleTools("w", (), True),))


async def test_the_constraint_is_merged_into_the_body() -> None:
    grammar = plan_constraint("grammar", SHAPE)
    async with model(Scenario(rules=[Rule(text="x")]), model="m",
                     extra_body={"top_k": 5}) as (server, client):
        await client.complete([USER], constraint=grammar)
    body = server.requests[0].body
    assert grammar is not None and body["grammar"] == grammar.body["grammar"]
    assert body["top_k"] == 5
    assert server.requests[0].constraint_kind == "grammar"


async def test_a_steps_answer_streams_one_step_at_a_time() -> None:
    steps = ['{"id": 1, "role": "w", "instruction": "a {b}"}', '{"id": 2, "role": "w", '
             '"instruction": "c ]"}']
    lines = ['{"steps": [', steps[0] + ",", steps[1], "]}"]
    rule = Rule(lines=lines, latency=Latency(per_line=0.1))
    constraint = plan_constraint("json_schema", SHAPE)
    async with model(Scenario(rules=[rule]), model="m") as (server, client):
        received: list[tuple[str, float]] = []
        async with client.stream_lines([USER], constraint=constraint) as stream:
            assert stream.framing == "steps"
            async for item in stream:
                received.append((item, time.monotonic()))
    assert [item for item, _ in received] == steps
    record = server.requests[0]
    assert received[0][1] < record.sent_at[-1], "step 1 came before the answer ended"
    assert record.body["response_format"]["type"] == "json_schema"
    assert stream.finish_reason == "stop" and stream.usage is not None


REFUSED: list[tuple[str, Rejection, str]] = [
    ("grammar", Rejection(constraint="grammar"), "HTTP 400"),  # OpenAI
    ("json_schema", Rejection(constraint="json_schema", status=500), "HTTP 500"),  # llama-cpp-py
    ("vllm", Rejection(constraint="structured_outputs", status=400), "HTTP 400"),
]


@pytest.mark.parametrize(("dialect", "rejection", "status"), REFUSED)
async def test_a_refused_dialect_is_a_configuration_error(
        dialect: str, rejection: Rejection, status: str) -> None:
    constraint = answer_constraint(dialect, Answer)
    scenario = Scenario(rules=[Rule(text="{}")], rejects=[rejection])
    async with model(scenario, model="m", name="local") as (server, client):
        with pytest.raises(StructuredOutputUnsupported) as caught:
            await client.complete([USER], constraint=constraint)
        plan = plan_constraint(dialect, SHAPE)
        with pytest.raises(StructuredOutputUnsupported):
            async with client.stream_lines([USER], constraint=plan) as lines:
                [line async for line in lines]
    message = str(caught.value)
    assert message.startswith(f"model preset 'local': the server at {server.base_url} does "
                              f"not speak structured = '{dialect}' ({status}")
    assert message.endswith("under [models.local]") and "'off'" in message
    assert "\n" not in message


async def test_an_unrelated_server_error_stays_a_model_error() -> None:
    constraint = answer_constraint("grammar", Answer)
    scenario = Scenario(rules=[Rule(error=500, error_message="out of memory")])
    async with model(scenario, model="m") as (_, client):
        with pytest.raises(ModelError) as caught:
            await client.complete([USER], constraint=constraint)
    assert not isinstance(caught.value, StructuredOutputUnsupported)


async def test_an_error_naming_the_dialect_without_a_constraint_is_a_model_error() -> None:
    scenario = Scenario(rules=[Rule(error=400, error_message="bad grammar somewhere")])
    async with model(scenario, model="m") as (_, client):
        with pytest.raises(ModelError):
            await client.complete([USER])


def test_an_inline_model_is_named_by_its_model() -> None:
    from runtime.models import refusal

    settings = ModelSettings(model="qwen", base_url="http://127.0.0.1:9/v1")
    error = refusal(400, "unknown field grammar", settings, Constraint("grammar", {}))
    assert error is not None and str(error).startswith("model 'qwen': the server at")
    assert "under the role's model table" in str(error)


async def test_a_server_that_ignores_the_schema_is_read_as_lines() -> None:
    rule = Rule(lines=['{"id": 1, "role": "w", "instruction": "a"}', "and some prose"])
    constraint = plan_constraint("json_object_schema", SHAPE)
    async with model(Scenario(rules=[rule]), model="m") as (_, client):
        async with client.stream_lines([USER], constraint=constraint) as stream:
            got = [line async for line in stream]
    assert got == ['{"id": 1, "role": "w", "instruction": "a"}', "and some prose"]
    assert stream.text.count("prose") == 1


def test_an_unknown_dialect_is_a_team_file_error_that_lists_the_dialects() -> None:
    from runtime.config import TeamConfigError, team_from_dict

    with pytest.raises(TeamConfigError) as caught:
        team_from_dict({"models": {"m": {"model": "x", "structured": "xml"}},
                        "roles": {"planner": {"kind": "planner", "model": "m"}}})
    message = str(caught.value)
    assert "structured" in message and "'grammar'" in message and "'json_schema'" in message


def test_a_preset_knows_its_name() -> None:
    from runtime.config import team_from_dict

    team = team_from_dict({"models": {"local": {"model": "x", "structured": "grammar"}},
                           "roles": {"planner": {"kind": "planner", "model": "local"},
                                     "critic": {"kind": "critic", "model": {"model": "y"}}}})
    planner, critic = team.roles["planner"].model, team.roles["critic"].model
    assert planner is not None and (planner.name, planner.structured) == ("local", "grammar")
    assert critic is not None and (critic.name, critic.structured) == ("", "off")
