"""Outputs larger than the server's max payload travel through the object store."""

from __future__ import annotations

from pathlib import Path

import anyio
import msgspec
import pytest

from protocols import (
    RunFailed,
    RunRequest,
    StepFinished,
    StepRecord,
    decode,
    objects_bucket,
    runs_bucket,
    step_key,
)
from runtime.bus import MAX_OBJECT_BYTES, open_bus
from runtime.client import follow, submit
from runtime.config import Settings, TeamConfig, load_team
from runtime.testing import open_scripted_model_server
from runtime.tools import FunctionTool, ToolRegistry, builtin_tools
from runtime.worker import open_deployment

from .harness import following, plan_scenario, team_toml

pytestmark = pytest.mark.anyio

SIZE = 3_000_000


class BigArgs(msgspec.Struct, frozen=True):
    size: int


async def big(args: BigArgs) -> str:
    return "x" * args.size


PLAN = [{"id": 1, "role": "worker", "tool": "big", "args": {"size": SIZE}},
        {"id": 2, "role": "worker", "tool": "echo", "args": {"text": "$1!"}}]
"""Step 1 writes SIZE bytes; step 2 gets them through ``$1``."""


def big_tools() -> ToolRegistry:
    tools = builtin_tools()
    tools.add(FunctionTool(big, name="big", description="a large output", args_type=BigArgs))
    return tools


def big_team(directory: Path, base_url: str) -> TeamConfig:
    team_file = directory / "team.toml"
    team_file.write_text(team_toml(base_url).replace('"gate", ', '"gate", "big", '))
    return load_team(team_file)


async def test_outputs_larger_than_max_payload_flow_by_reference(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    async with open_scripted_model_server(plan_scenario(PLAN, "big done")) as model:
        settings = Settings(nats_url=nats_url, prefix=prefix, max_stream_bytes=64 << 20)
        async with open_deployment(settings, big_team(tmp_path, model.base_url),
                                   big_tools()) as bus:
            assert SIZE > bus.max_payload
            accepted = await submit(bus, RunRequest(goal="big data"))
            async with following(bus, accepted.run_id) as events:
                finished = await events.finished()
            kv = await bus.js.key_value(runs_bucket(prefix))
            entries = [await kv.get(step_key(accepted.run_id, sid)) for sid in (1, 2)]
            records = [decode(e.value, StepRecord) for e in entries]
            stored = [await bus.get_object(r.output_ref) for r in records if r.output_ref]
        synthesis = [r for r in model.requests if r.headers.get("x-plancast-role") == "synthesizer"]
    assert finished.answer == "big done"
    [second] = events.of(StepFinished, 2)
    assert second.output.startswith("xxxx") and len(second.output) < 10_000  # a preview
    assert all(len(e.value) < 10_000 for e in entries)  # references, not outputs
    assert sorted(len(b) for b in stored) == [SIZE, SIZE + 1]
    assert len(synthesis[0].body["messages"][-1]["content"]) > 2 * SIZE  # it saw everything


async def test_a_full_store_fails_the_run_saying_what_to_raise(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    async with open_scripted_model_server(plan_scenario(PLAN, "never")) as model:
        # Room for step 1's output, not for step 2's task (which carries it) and its result.
        settings = Settings(nats_url=nats_url, prefix=prefix, max_stream_bytes=5 << 20)
        async with open_deployment(settings, big_team(tmp_path, model.base_url),
                                   big_tools()) as bus:
            accepted = await submit(bus, RunRequest(goal="too big"))
            with anyio.fail_after(60):
                events = [e async for e in follow(bus, accepted.run_id)]
    failed = events[-1]
    assert isinstance(failed, RunFailed), events
    assert failed.cause == "storage", failed
    assert "is full" in failed.reason and "PLANCAST_MAX_STREAM_BYTES" in failed.reason


async def test_object_references_are_checked_before_anything_is_fetched(
    nats_url: str, prefix: str
) -> None:
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix)) as bus:
        ref = await bus.put_object("result.r1.worker", b"y" * 300_000)
        assert await bus.get_object(ref) == b"y" * 300_000
        assert await bus.get_object(ref, space="result.r1.worker") == b"y" * 300_000
        own = objects_bucket(prefix)
        for bad in (msgspec.structs.replace(ref, bucket="SOMEONE_ELSES"),
                    msgspec.structs.replace(ref, sha256=""),
                    msgspec.structs.replace(ref, size=MAX_OBJECT_BYTES + 1),
                    msgspec.structs.replace(ref, sha256="0" * 64),
                    msgspec.structs.replace(ref, name="result.r1.worker/a.b/c"),
                    msgspec.structs.replace(ref, name="result.*.worker/x")):
            with pytest.raises(ValueError, match=f"{own}|digest"):
                await bus.get_object(bad)
        # An object outside the space its message came on (another role's) is refused
        # before anything is fetched.
        with pytest.raises(ValueError, match=r"of space result\.r1\.other"):
            await bus.get_object(ref, space="result.r1.other")
