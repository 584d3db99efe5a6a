"""Input no actor can use, sent again and again while a run goes on: every actor keeps
serving, the run finishes, and nothing is delivered more than once (bad input is
dead-lettered and terminated, never redelivered).
"""

from __future__ import annotations

import json

import anyio
import pytest
from nats.js.errors import APIError

from protocols import RunFinished, StepStarted, Stream, Verb, objects_bucket, stream_name
from runtime.bus import Bus, open_bus
from runtime.client import follow
from runtime.config import Settings
from runtime.testing import Rule

from ..actors.harness import finish, plan_line, run_team

pytestmark = pytest.mark.anyio

ROUNDS = 3
MESSAGE_TOO_LARGE = 10054
"""JetStream's "message size exceeds maximum allowed" (a stream's ``max_msg_size``)."""


def _hostile(prefix: str) -> dict[str, bytes]:
    envelope = {"type": "message.offloaded", "schema_version": 1, "inner_type": "step.task",
                "ref": {"bucket": objects_bucket(prefix), "name": "x", "size": 10**10,
                        "sha256": "0" * 64}}
    elsewhere = {**envelope, "ref": {**envelope["ref"], "bucket": "SOMEONE_ELSES", "size": 9}}
    return {
        "invalid utf-8": b'{"type": "step.task", "goal": "\xff\xfe\xfd"}',
        "deep nesting": b'{"type": "step.task", "goal": ' + b"[" * 100_000 + b"]" * 100_000
                        + b"}",
        "huge string": b'{"type": "step.task", "goal": "' + b"a" * 600_000 + b'"}',
        "oversized envelope": json.dumps(envelope).encode(),
        "envelope elsewhere": json.dumps(elsewhere).encode(),
        "not json": b"\x00\x01 definitely not json",
    }


async def test_actors_survive_hostile_input_and_a_concurrent_run_finishes(
    nats_url: str, prefix: str
) -> None:
    sent: list[str] = []

    async def attack(bus: Bus, run_id: str) -> None:
        async for event in follow(bus, run_id):
            if isinstance(event, StepStarted):
                break
        targets = [bus.subject(Verb.STEP, "worker"), bus.subject(Verb.SYNTHESIS),
                   bus.subject(Verb.RESULT, run_id, "worker"), bus.subject(Verb.DEAD, "worker")]
        for _ in range(ROUNDS):
            for name, payload in _hostile(bus.prefix).items():
                for target in targets:
                    try:
                        await bus.js.publish(target, payload)
                    except APIError as exc:  # larger than any stream takes: no actor sees it
                        assert exc.err_code == MESSAGE_TOO_LARGE and name == "huge string"
                    sent.append(f"{name} → {target}")
                await bus.nc.publish(bus.subject(Verb.EVENT, run_id), payload)  # for followers

    out = await run_team(nats_url, prefix, [
        Rule(role="planner", lines=[plan_line(1, tool="sleep", args={"seconds": 3})]),
        finish("still here")],
        roles={"supervisor": {"kind": "supervisor"}}, during=attack)
    assert isinstance(out.events[-1], RunFinished) and out.answer == "still here"
    assert len(sent) == ROUNDS * 6 * 4

    async with open_bus(Settings(nats_url=nats_url, prefix=prefix)) as bus:
        work = stream_name(prefix, Stream.WORK)
        for stream, consumer in [(work, "step-worker"), (work, "synthesis"),
                                 (stream_name(prefix, Stream.DEAD), "supervisor")]:
            with anyio.fail_after(10):
                while (info := await bus.js.consumer_info(stream, consumer)).num_ack_pending:
                    await anyio.sleep(0.1)
            assert info.num_redelivered == 0, (consumer, info)
            assert info.num_pending == 0, (consumer, info)

