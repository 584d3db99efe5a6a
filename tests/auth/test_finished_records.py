"""The records of finished attempts under per-role users: an executor role writes and reads
back its own records, and the server refuses every other user the writes, and every other
role the reads, of that role's records (``runtime.bus.auth``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from protocols import (
    RunFinished,
    RunRequest,
    StepResult,
    Stream,
    Verb,
    decode,
    stream_name,
    subject,
)
from runtime.bus import open_bus
from runtime.client import follow, submit
from runtime.testing import Rule, Scenario, open_scripted_model_server

from ..actors.harness import echo, finish, make_team
from ..secured import Secured, secured_server
from .test_object_reads import Asker

pytestmark = pytest.mark.anyio

ROLES = {
    "worker": {"description": "runs tools", "tools": ["echo"], "tool_steps_only": True},
    "other": {"description": "another executor", "tools": ["echo"], "tool_steps_only": True},
}


@pytest.fixture
async def secured(tmp_path: Path, prefix: str) -> AsyncIterator[Secured]:
    async with open_scripted_model_server(Scenario(rules=[
            Rule(role="planner", lines=[echo(1, "hello")]), finish("done")])) as model:
        async with secured_server(tmp_path, prefix, make_team(model.base_url, ROLES)) as s:
            yield s


async def test_a_role_writes_and_reads_only_its_own_records(secured: Secured) -> None:
    p = secured.prefix
    async with secured.serving(["planner", "worker", "synthesizer"]):
        async with open_bus(secured.settings("client")) as client:
            accepted = await submit(client, RunRequest(goal="hi"))
            with anyio.fail_after(60):
                events = [e async for e in follow(client, accepted.run_id)]
    assert isinstance(events[-1], RunFinished)
    record = subject(p, Verb.FINISHED, "worker", accepted.run_id, "1", "1")
    read = f"$JS.API.DIRECT.GET.{stream_name(p, Stream.FINISHED)}.{record}"
    async with Asker(secured, "worker") as worker:
        assert await worker.answered(read)  # its own record, as the executor wrote it
        kept = decode(worker.replies[0].data, StepResult)
        assert kept.output == "hello" and kept.run_id == accepted.run_id
        assert not await worker.answered(  # another role's: refused
            subject(p, Verb.FINISHED, "other", accepted.run_id, "1", "1"), b"{}")
    async with Asker(secured, "other") as other:
        assert not await other.answered(read)
        assert not await other.answered(record, b"{}")
        assert await other.answered(subject(p, Verb.FINISHED, "other", "r1", "1", "1"), b"{}")
    for user in ("planner", "synthesizer", "client", "watcher"):
        async with Asker(secured, user) as someone:
            assert not await someone.answered(record, b"{}"), user
