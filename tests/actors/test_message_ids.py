"""Message ids nobody else can take: a message stored first under an id the planner will
use neither replaces nor hangs its own. The planner's ids are keyed with the planners'
secret (``runtime.nonces``); and a de-duplicated publish whose stored message is not ours
is detected and sent again under a new id, never waited on.
"""

from __future__ import annotations

import pytest

from protocols import PlanAwaitingApproval, RunRequest, Stream, Verb, decode, stream_name
from runtime.bus import Bus, open_bus
from runtime.client import decide_plan, follow
from runtime.config import Settings
from runtime.testing import Rule

from .harness import NONCES, echo, finish, run_team

pytestmark = pytest.mark.anyio


async def test_a_publish_whose_id_was_taken_is_stored_anew(nats_url: str, prefix: str) -> None:
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix)) as bus:
        subject = bus.subject(Verb.EVENT, "run-squatted")  # a stream that keeps it
        taken = await bus.publish_durable(
            subject, RunRequest(goal="the squatter's"), msg_id="run-squatted/id")
        seq = await bus.publish_durable(subject, RunRequest(goal="ours"), msg_id="run-squatted/id",
                                        fresh=True)
        stored = await bus.js.get_msg(stream_name(prefix, Stream.EVENTS), seq)
        assert seq != taken and decode(stored.data, RunRequest).goal == "ours"
        # A retry of our own publish is still stored once.
        again = await bus.publish_durable(
            subject, RunRequest(goal="ours"), msg_id=stored.headers["Nats-Msg-Id"])
        assert again == seq


async def test_a_task_id_taken_first_does_not_hang_the_run(nats_url: str, prefix: str) -> None:
    """A local process on an open bus (it reads the run's fence) stores junk first under
    the ids step 1's task would have: the one plancast used before, and the keyed one of a
    planner that has no secret. The run still ends, with step 1 run."""
    async def squat(bus: Bus, run_id: str) -> None:
        async for event in follow(bus, run_id):
            if isinstance(event, PlanAwaitingApproval):
                break
        fence = await bus.js.get_last_msg(stream_name(prefix, Stream.EVENTS),
                                          bus.subject(Verb.FENCE, run_id))
        base = f"{run_id}/1/1/f{fence.seq}"
        for msg_id in (base, NONCES.msg_id(base)):
            await bus.js.publish(bus.subject(Verb.STEP, "worker"), b'{"type": "junk"}',
                                 headers={"Nats-Msg-Id": msg_id})
        await decide_plan(bus, run_id, approved=True, by="test")

    out = await run_team(nats_url, prefix, [
        Rule(role="planner", lines=[echo(1, "hello")]), finish("done")],
        review_plan="human", during=squat)
    assert out.finished(1).output == "hello" and out.answer == "done"
