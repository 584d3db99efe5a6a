"""What the model client sends again, and that every request it sent is counted: against
the scripted model server, through the real openai client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import pytest

from runtime.config import ModelSettings
from runtime.models import ModelClient, ModelError, StructuredOutputUnsupported, answer_constraint
from runtime.testing import (
    Rejection,
    Rule,
    Scenario,
    ScriptedModelServer,
    open_scripted_model_server,
)

pytestmark = pytest.mark.anyio

USER = {"role": "user", "content": "What is the capital of France?"}


class Answer(msgspec.Struct):
    capital: str


@asynccontextmanager
async def model(scenario: Scenario, **settings: Any
                ) -> AsyncIterator[tuple[ScriptedModelServer, ModelClient]]:
    async with open_scripted_model_server(scenario) as server:
        options = {"model": "m", "name": "local", "api_key_env": "PLANCAST_TEST_UNSET_KEY",
                   **settings}
        async with ModelClient(ModelSettings(base_url=server.base_url, **options)) as client:
            yield server, client


async def test_a_server_error_is_sent_again_and_every_request_counts() -> None:
    scenario = Scenario(rules=[Rule(error=503, times=2), Rule(text="Paris")])
    async with model(scenario, max_retries=2) as (server, client):
        completion = await client.complete([USER])
    assert completion.text == "Paris" and len(server.requests) == 3
    assert completion.usage.calls == 3 and client.total_usage.calls == 3


async def test_a_refused_dialect_is_sent_once_and_counted() -> None:
    scenario = Scenario(rules=[Rule(text="{}")],
                        rejects=[Rejection(constraint="json_schema", status=500)])
    async with model(scenario, max_retries=2, structured="json_schema") as (server, client):
        with pytest.raises(StructuredOutputUnsupported, match="json_schema") as caught:
            await client.complete([USER], constraint=answer_constraint(
                "json_schema", Answer))
        assert caught.value.usage is not None and caught.value.usage.calls == 1
        assert "Error code" not in str(caught.value)  # the server's own message, once
        with pytest.raises(StructuredOutputUnsupported):
            async with client.stream_lines([USER], constraint=answer_constraint(
                    "json_schema", Answer)) as lines:
                async for _ in lines:
                    pass
    assert len(server.requests) == 2  # one each, not the openai client's three
    assert lines.usage is not None and lines.usage.calls == 1
    assert client.total_usage.calls == 2


async def test_a_server_that_sends_nothing_is_given_up_after_the_first_byte_deadline() -> None:
    scenario = Scenario(rules=[Rule(silent=True)])
    async with model(scenario, max_retries=2, first_byte_timeout=0.5) as (server, client):
        with pytest.raises(ModelError) as caught:
            async with client.stream_lines([USER]) as lines:
                async for _ in lines:
                    pass
    message = str(caught.value)
    assert server.base_url in message and "preset 'local'" in message
    assert "first_byte_timeout" in message
    assert len(server.requests) == 1 and lines.usage is not None and lines.usage.calls == 1


async def test_a_whole_answer_that_times_out_is_not_asked_again() -> None:
    scenario = Scenario(rules=[Rule(silent=True)])
    async with model(scenario, max_retries=2, timeout=0.5) as (server, client):
        with pytest.raises(ModelError, match="did not answer within"):
            await client.complete([USER])
    assert len(server.requests) == 1 and client.total_usage.calls == 1
