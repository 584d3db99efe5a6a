"""``submit`` and ``follow`` through lost replies, restarts and node losses."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.to_thread
import pytest
from nats.aio.msg import Msg

from protocols import (
    RunAccepted,
    RunEvent,
    RunFinished,
    RunRejected,
    RunRequest,
    RunResumed,
    RunStarted,
    StepStarted,
    Stream,
    Verb,
    decode,
    encode,
    stream_name,
)
from runtime.bus import Bus, NatsServerProcess, open_bus
from runtime.client import RunNotAccepted, RunRefused, RunStalled, follow, submit
from runtime.config import Settings

from .test_connection import no_stray_tasks, recording

pytestmark = pytest.mark.anyio

SLACK = 5.0
"""Seconds allowed past a deadline for the event loop, the OS and a busy machine."""


# -- submit -------------------------------------------------------------------------------


@asynccontextmanager
async def fake_planner(bus: Bus, *, ignore: int) -> AsyncIterator[list[RunRequest]]:
    """Answers ``run.submit`` as a planner does, except for the first ``ignore`` requests
    (as if the reply were lost); yields every request it received."""
    received: list[RunRequest] = []

    async def answer(msg: Msg) -> None:
        request: RunRequest = decode(msg.data, RunRequest)
        received.append(request)
        if len(received) > ignore:
            assert request.run_id is not None
            await msg.respond(encode(RunAccepted(
                run_id=request.run_id, events_subject=bus.subject(Verb.EVENT, request.run_id))))

    sub = await bus.nc.subscribe(bus.subject(Verb.RUN_SUBMIT), queue="planner", cb=answer)
    try:
        yield received
    finally:
        await sub.unsubscribe()


async def test_submit_sends_again_after_a_timeout_with_the_same_run_id(
    nats_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first reply is lost; the request is sent again under the same run id, so the
    planner (answering "accepted" for a run it knows) cannot start the run twice."""
    monkeypatch.setattr("runtime.client.runs.SUBMIT_ATTEMPT", 0.3)
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix), ensure_streams=False) as bus:
        async with fake_planner(bus, ignore=1) as received:
            accepted = await submit(bus, RunRequest(goal="g"), timeout=10.0)
    assert len(received) == 2
    assert received[0].run_id is not None and received[0] == received[1]
    assert accepted.run_id == received[0].run_id


async def test_submit_keeps_the_run_id_the_caller_chose(nats_url: str, prefix: str) -> None:
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix), ensure_streams=False) as bus:
        async with fake_planner(bus, ignore=0) as received:
            accepted = await submit(bus, RunRequest(goal="g", run_id="mine-1"))
    assert accepted.run_id == "mine-1" and [r.run_id for r in received] == ["mine-1"]


async def test_submit_gives_up_at_its_timeout_naming_the_run(
    nats_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A planner that never answers: RunNotAccepted at the timeout, with the run id (it
    may still start) and how to check."""
    monkeypatch.setattr("runtime.client.runs.SUBMIT_ATTEMPT", 0.2)
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix), ensure_streams=False) as bus:
        async with fake_planner(bus, ignore=1000) as received:
            started = anyio.current_time()
            with pytest.raises(RunNotAccepted) as err:
                await submit(bus, RunRequest(goal="g"), timeout=1.5)
            elapsed = anyio.current_time() - started
    assert elapsed < 1.5 + SLACK
    assert len(received) >= 2 and len({r.run_id for r in received}) == 1
    assert str(received[0].run_id) in str(err.value) and "plancast status" in str(err.value)


async def test_submit_without_a_planner_says_how_to_start_one(nats_url: str, prefix: str) -> None:
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix), ensure_streams=False) as bus:
        with pytest.raises(RunNotAccepted, match="plancast worker --role planner"):
            await submit(bus, RunRequest(goal="g"), timeout=0.5)


@asynccontextmanager
async def unstoring_planner(bus: Bus, *, unstored: int,
                            final: RunRejected | None = None) -> AsyncIterator[list[str]]:
    """A planner that answers "could not store it now" (retryable) ``unstored`` times, then
    ``final`` or accepted; on ``run.submit`` (queue group) and ``run.resubmit`` (all);
    yields the subject of every request it received."""
    subjects: list[str] = []

    async def answer(msg: Msg) -> None:
        request: RunRequest = decode(msg.data, RunRequest)
        assert request.run_id is not None
        subjects.append(msg.subject)
        reply: RunAccepted | RunRejected = final or RunAccepted(
            run_id=request.run_id, events_subject=bus.subject(Verb.EVENT, request.run_id))
        if len(subjects) <= unstored:
            reply = RunRejected(reason="no response from stream", retryable=True)
        await msg.respond(encode(reply))

    subs = [await bus.nc.subscribe(bus.subject(Verb.RUN_SUBMIT), queue="planner", cb=answer),
            await bus.nc.subscribe(bus.subject(Verb.RUN_RESUBMIT), cb=answer)]
    try:
        yield subjects
    finally:
        for sub in subs:
            await sub.unsubscribe()


async def test_submit_sends_again_what_the_planner_could_not_store_yet(
    nats_url: str, prefix: str,
) -> None:
    """"Could not store it now" is not a refusal: sent again, to every planner; a refusal
    of the request itself is final at once."""
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix), ensure_streams=False) as bus:
        async with unstoring_planner(bus, unstored=2) as subjects:
            accepted = await submit(bus, RunRequest(goal="g", run_id="mine-2"), timeout=10.0)
        assert accepted.run_id == "mine-2"
        assert subjects == [bus.subject(Verb.RUN_SUBMIT), *[bus.subject(Verb.RUN_RESUBMIT)] * 2]
        async with unstoring_planner(bus, unstored=1, final=RunRejected(reason="no")) \
                as subjects:
            with pytest.raises(RunRefused, match="no"):
                await submit(bus, RunRequest(goal="g"), timeout=10.0)
        assert len(subjects) == 2
        async with unstoring_planner(bus, unstored=1000) as subjects:
            with pytest.raises(RunNotAccepted, match=r"could store run mine-3.*no response"):
                await submit(bus, RunRequest(goal="g", run_id="mine-3"), timeout=1.0)


# -- follow -------------------------------------------------------------------------------


def started(run_id: str, seq: int) -> RunStarted:
    return RunStarted(run_id=run_id, seq=seq, goal=f"event {seq}")


async def publish(bus: Bus, event: RunEvent, *, copy: int = 0) -> None:
    """Store an event as the planner does (``copy`` > 0 stores it again, as a resend
    outside the duplicate window would)."""
    await bus.publish_durable(bus.subject(Verb.EVENT, event.run_id), event,
                              msg_id=f"{event.run_id}/e{event.seq}/{copy}")


class Collector:
    """Follows a run in the background; tests wait for a number of events."""

    def __init__(self, bus: Bus, run_id: str) -> None:
        self.bus, self.run_id = bus, run_id
        self.events: list[RunEvent] = []
        self.done = anyio.Event()
        self._waiting: list[tuple[int, anyio.Event]] = []

    async def run(self) -> None:
        async for event in follow(self.bus, self.run_id):
            self.events.append(event)
            for count, reached in self._waiting:
                if len(self.events) >= count:
                    reached.set()
        self.done.set()

    async def wait_for(self, count: int, timeout: float = 60.0) -> None:
        reached = anyio.Event()
        self._waiting.append((count, reached))
        if len(self.events) >= count:
            reached.set()
        with anyio.fail_after(timeout):
            await reached.wait()

    def seqs(self) -> list[int]:
        return [e.seq for e in self.events]


async def test_follow_skips_an_unknown_event_type_without_stalling(
    nats_url: str, prefix: str,
) -> None:
    """An event type from a newer deployment takes its number but is not yielded."""
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix)) as bus:
        await publish(bus, started("r1", 1))
        future = {"type": "event.from.the.future", "schema_version": 1, "run_id": "r1",
                  "seq": 2, "ts": 0.0, "novelty": [1, 2, 3]}
        await bus.js.publish(bus.subject(Verb.EVENT, "r1"), json.dumps(future).encode())
        await publish(bus, RunFinished(run_id="r1", seq=3, answer="done"))
        with anyio.fail_after(10):
            events = [event async for event in follow(bus, "r1")]
    assert [(type(e), e.seq) for e in events] == [(RunStarted, 1), (RunFinished, 3)]


async def test_follow_yields_each_event_once_in_order(nats_url: str, prefix: str) -> None:
    """Stored out of order and twice (a failover's resends): yielded once each, in order;
    nothing of follow() is left afterwards."""
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix)) as bus:
        stored: list[tuple[RunEvent, int]] = [
            (started("r1", 2), 0), (started("r1", 1), 0), (started("r1", 2), 1),
            (started("r1", 1), 1), (RunFinished(run_id="r1", seq=3, answer="a"), 0)]
        for event, copy in stored:
            await publish(bus, event, copy=copy)
        async with no_stray_tasks():
            with anyio.fail_after(10):
                events = [event async for event in follow(bus, "r1")]
        consumers = await bus.js.consumers_info(stream_name(prefix, Stream.EVENTS))
        assert consumers == [], "follow removes its consumer when it ends"
    assert [e.seq for e in events] == [1, 2, 3]


async def test_follow_fetches_offloaded_events(nats_url: str, prefix: str) -> None:
    """An event larger than a message travels through the object store and comes back
    whole."""
    settings = Settings(nats_url=nats_url, prefix=prefix, max_message_bytes=1024)
    answer = "x" * 50_000
    async with open_bus(settings) as bus:
        await publish(bus, started("r1", 1))
        await publish(bus, RunFinished(run_id="r1", seq=2, answer=answer))
        with anyio.fail_after(10):
            events = [event async for event in follow(bus, "r1")]
    assert isinstance(events[-1], RunFinished) and events[-1].answer == answer


async def test_follow_raises_when_the_run_goes_quiet_past_the_idle_timeout(
    nats_url: str, prefix: str,
) -> None:
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix)) as bus:
        await publish(bus, started("r1", 1))
        events: list[RunEvent] = []
        begun = anyio.current_time()
        with pytest.raises(RunStalled, match=r"run r1 published no event for 0\.5s"):
            async for event in follow(bus, "r1", idle_timeout=0.5):
                events.append(event)
        assert anyio.current_time() - begun < 0.5 + SLACK
    assert [e.seq for e in events] == [1]


async def test_follow_rides_out_a_server_restart(
    fresh_nats_server: NatsServerProcess, prefix: str,
) -> None:
    """Events before, during and after a restart of the only server: each once, in order,
    for a follower that was reading when the server stopped, and for one that began while
    it was down."""
    settings = Settings(nats_url=fresh_nats_server.url, prefix=prefix)
    async with open_bus(settings) as bus, anyio.create_task_group() as tg:
        for seq in (1, 2, 3):
            await publish(bus, started("r1", seq))
        early, late = Collector(bus, "r1"), Collector(bus, "r1")
        tg.start_soon(early.run)
        await early.wait_for(3)
        await anyio.to_thread.run_sync(fresh_nats_server.stop)
        with recording("runtime.client.runs") as logged:
            tried = logged.at_least("reading again")
            tg.start_soon(late.run)
            await tried.wait()  # the late follower found no server
        await anyio.to_thread.run_sync(fresh_nats_server.start)
        for seq in (4, 5):  # retried by publish_durable until the connection is back
            await publish(bus, started("r1", seq))
        await early.wait_for(5)
        await publish(bus, RunFinished(run_id="r1", seq=6, answer="done"))
        with anyio.fail_after(60):
            await early.done.wait()
            await late.done.wait()
    assert early.seqs() == late.seqs() == [1, 2, 3, 4, 5, 6]


async def consumer_node(bus: Bus, stream: str, servers: list[NatsServerProcess],
                        ) -> NatsServerProcess:
    """The cluster node hosting the (only) consumer of ``stream``."""
    infos = await bus.js.consumers_info(stream)
    assert len(infos) == 1, infos
    leader = infos[0].cluster.leader if infos[0].cluster else None
    return next(s for s in servers if s.server_name == leader)


@pytest.mark.cluster
async def test_follow_rides_out_the_loss_of_a_cluster_node(
    nats_cluster: list[NatsServerProcess], prefix: str,
) -> None:
    """The node holding follow()'s consumer dies mid-run, and another follower begins right
    after: every event still comes to both, once, in order."""
    urls = ",".join(s.url for s in nats_cluster)
    settings = Settings(nats_url=urls, prefix=prefix, replicas=3)
    async with open_bus(settings) as bus, anyio.create_task_group() as tg:
        for seq in (1, 2, 3):
            await publish(bus, started("r1", seq))
        early, late = Collector(bus, "r1"), Collector(bus, "r1")
        tg.start_soon(early.run)
        await early.wait_for(3)
        victim = await consumer_node(bus, stream_name(prefix, Stream.EVENTS), nats_cluster)
        await anyio.to_thread.run_sync(victim.kill)
        tg.start_soon(late.run)
        for seq in (4, 5):
            await publish(bus, StepStarted(run_id="r1", seq=seq, step_id=seq, attempt=1,
                                           executor="e"))
        await early.wait_for(5)
        await publish(bus, RunFinished(run_id="r1", seq=6, answer="done"))
        with anyio.fail_after(60):
            await early.done.wait()
            await late.done.wait()
    assert early.seqs() == late.seqs() == [1, 2, 3, 4, 5, 6]


async def test_follow_does_not_wait_for_a_number_a_new_owner_declares_lost(
    nats_url: str, prefix: str,
) -> None:
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix)) as bus:
        await publish(bus, started("r1", 1))  # 2 was lost with the previous owner
        await publish(bus, RunResumed(run_id="r1", seq=3, planner="p/2", previous="p/1",
                                      skipped=[2]))
        await publish(bus, RunFinished(run_id="r1", seq=4, answer="done"))
        with anyio.fail_after(10):
            events = [event async for event in follow(bus, "r1")]
    assert [e.seq for e in events] == [1, 3, 4]


async def test_follow_drops_an_event_stored_behind_a_number_a_new_owner_declares_lost(
    nats_url: str, prefix: str,
) -> None:
    """Chaos seed 42, run c42-0007: the previous owner's dispatch (2) was lost in a
    failover, its next event, the step's start (3), was stored; the new owner lists both
    as skipped, and a reader does not see a start without its dispatch."""
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix)) as bus:
        await publish(bus, started("r1", 1))
        await publish(bus, StepStarted(run_id="r1", seq=3, step_id=1, attempt=1, executor="e"))
        await publish(bus, RunResumed(run_id="r1", seq=4, planner="p/2", previous="p/1",
                                      skipped=[2, 3]))
        await publish(bus, RunFinished(run_id="r1", seq=5, answer="done"))
        with anyio.fail_after(10):
            events = [event async for event in follow(bus, "r1")]
    assert [e.seq for e in events] == [1, 4, 5]
