"""A short successful result is acknowledged once its events are stored: the run's state
is a checkpoint written every so often, and a planner taking the run over replays the
events since (``resume.fold``, tested in ``test_resume``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel
import msgspec
import pytest
from nats.js.errors import NotFoundError

from actors.run import LostRun, RunSaver, SaveBehind
from protocols import (
    ReplanStarted,
    RunRecord,
    StepPlanned,
    StepRecord,
    StepRecords,
    StepStarted,
    Stream,
    decode,
    ended_key,
    run_key,
    runs_bucket,
    step_key,
    step_keys,
    stream_name,
)
from runtime.bus import Bus
from runtime.client import follow
from runtime.testing import Rule
from runtime.tools import FunctionTool, builtin_tools

from .harness import finish, plan_line, run_team

pytestmark = pytest.mark.anyio


class HoldArgs(msgspec.Struct, frozen=True):
    name: str


async def test_a_short_result_is_acknowledged_before_the_state_records_it(
    nats_url: str, prefix: str
) -> None:
    released = {"a": anyio.Event(), "b": anyio.Event()}

    async def hold(args: HoldArgs) -> str:
        await released[args.name].wait()
        return f"{args.name} done"

    tools = builtin_tools(plugins=False)
    tools.add(FunctionTool(hold, name="hold", description="waits for the test",
                           args_type=HoldArgs))
    seen: dict[str, Any] = {}

    async def during(bus: Bus, run_id: str) -> None:
        bucket = runs_bucket(prefix)

        async def record(key: str) -> bytes:
            raw = await bus.js.get_last_msg(f"KV_{bucket}", f"$KV.{bucket}.{key}")
            return raw.data or b""

        started = 0
        with anyio.fail_after(30):
            async for event in follow(bus, run_id):
                if not isinstance(event, StepStarted):
                    continue
                started += 1
                if started == 1:  # step 1 runs once the whole plan is written down
                    header = run_key(run_id)
                    while not decode(await record(header), RunRecord).plan_closed:  # noqa: ASYNC110
                        await anyio.sleep(0.05)  # server state: no event to wait on
                    released["a"].set()
                    continue
                # Step 2 started: step 1's result was applied. Its acknowledgement is
                # on its way (the server shows it a moment later); its record is not.
                consumer = (stream_name(prefix, Stream.RESULTS), f"run-{run_id}")
                while (await bus.js.consumer_info(*consumer)).num_ack_pending:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
                try:
                    seen["step 1"] = decode(await record(step_key(run_id, 1)),
                                            StepRecord).status
                except NotFoundError:  # planned and dispatched: its events say all
                    seen["step 1"] = "no record"
                released["b"].set()
                return

    out = await run_team(nats_url, prefix, [
        Rule(role="planner", lines=[plan_line(1, tool="hold", args={"name": "a"}),
                                    plan_line(2, tool="hold", args={"name": "b"},
                                              depends_on=[1])]),
        finish("both held")], tools=tools, during=during,
        roles={"worker": {"description": "runs tools", "tools": ["hold"],
                          "tool_steps_only": True}},
        settings={"run_lease": 60.0})  # no renewal (a save) while the test looks
    assert out.answer == "both held"
    assert seen == {"step 1": "no record"}  # acknowledged; no state says it is done


async def test_a_step_gets_one_record_written_once_it_ends(nats_url: str, prefix: str) -> None:
    """Planned, dispatched, claimed and finished with its whole output, a step's events
    say all: the state writes its record once, when the run ends (a wide plan wrote two
    per step, then one per step as it finished, then one per step at the end), and the
    run's last state has them all, in one ``ended`` entry written once."""
    writes: dict[str, int] = {}
    outputs: dict[int, str | None] = {}
    headers: list[RunRecord] = []

    async def last_state(bus: Bus, run_id: str) -> None:
        await header_watch(prefix, headers)(bus, run_id)  # the last save follows run.finished
        assert headers[-1].status == "finished"
        assert headers[-1].replayed == [] and headers[-1].steps_done == 40
        assert headers[-1].ended == 1
        # Writes per key from the stream itself: nats-py's kv.history can miss a key's
        # only entry under load (its watcher reads the consumer's count after delivery).
        bucket = runs_bucket(prefix)
        for keys in (step_keys(run_id), f"runs.{run_id}.ended.*"):
            info = await bus.js.stream_info(f"KV_{bucket}",
                                            subjects_filter=f"$KV.{bucket}.{keys}")
            writes.update(info.state.subjects or {})
        kv = await bus.js.key_value(bucket)
        entry = decode((await kv.get(ended_key(run_id, 0))).value or b"", StepRecords)
        for raw in entry.records:
            record = decode(bytes(raw), StepRecord)
            outputs[record.step.id] = record.output

    lines = [plan_line(i, tool="echo", args={"text": f"{i}"}) for i in range(1, 41)]
    out = await run_team(nats_url, prefix, [Rule(role="planner", lines=lines),
                                            finish("done")], after=last_state)
    assert out.answer == "done"
    assert list(writes.values()) == [1], writes  # one entry, written once
    assert outputs == {sid: f"{sid}" for sid in range(1, 41)}


def header_watch(prefix: str, headers: list[RunRecord]) -> Callable[[Bus, str], Awaitable[None]]:
    """``during``: every header the run writes (a save), until one says the run ended."""
    async def watch(bus: Bus, run_id: str) -> None:
        kv = await bus.js.key_value(runs_bucket(prefix))
        watcher = await kv.watch(run_key(run_id))
        try:
            async for entry in watcher:
                if entry is not None and entry.value:
                    headers.append(decode(entry.value, RunRecord))
                    if headers[-1].status != "active":
                        return
        finally:
            await watcher.stop()
    return watch


async def test_a_step_planned_longer_ago_than_the_replay_limit_gets_its_record(
    nats_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save looks at the steps that changed, and at the oldest without a record: one
    planned more than ``REPLAY_LIMIT`` events ago gets its record while the run goes on."""
    monkeypatch.setattr(RunSaver, "REPLAY_LIMIT", 12)
    monkeypatch.setattr(RunSaver, "CHECKPOINT_EVERY", 2)
    headers: list[RunRecord] = []
    lines = [plan_line(i, tool="echo", args={"text": f"{i}"},
                       depends_on=[i - 1] if i > 1 else []) for i in range(1, 31)]
    out = await run_team(nats_url, prefix, [Rule(role="planner", lines=lines),
                                            finish("done")],
                         during=header_watch(prefix, headers))
    assert out.answer == "done"
    planned = {e.step.id: e.seq for e in out.of(StepPlanned)}
    active = [h for h in headers if h.status == "active" and h.order]
    assert active and headers[-1].status == "finished"
    for header in active:  # no header leaves a takeover more than the limit to replay
        assert all(header.next_seq - planned[sid] <= 12 for sid in header.replayed), header
        assert set(header.replayed) <= set(header.order)
    assert any(1 in h.order and 1 not in h.replayed for h in active)


async def test_steps_dropped_by_a_replan_leave_the_steps_to_replay(
    nats_url: str, prefix: str
) -> None:
    """A pending step has no record (its events say all); a replan drops it, and the next
    header no longer sends a takeover to its events."""
    headers: list[RunRecord] = []
    rules = [
        Rule(role="planner", contains="A new plan is needed because",
             lines=[plan_line(3, tool="echo", args={"text": "round 1"})]),
        Rule(role="planner", lines=[plan_line(1, tool="math", args={"expression": "1 / 0"}),
                                    plan_line(2, tool="echo", args={"text": "$1"})]),
        finish("done"),
    ]
    out = await run_team(nats_url, prefix, rules, step_attempts=1,
                         during=header_watch(prefix, headers))
    assert out.answer == "done" and out.first(ReplanStarted).round == 1
    assert any(h.round == 0 and 2 in h.replayed for h in headers)
    later = [h for h in headers if h.round == 1]
    assert later and headers[-1].status == "finished"
    for header in later:
        assert 2 not in header.replayed and set(header.replayed) <= set(header.order)


class _SlowSaves:
    """A run whose saves wait for the test (or fail): what ``SaveBehind`` sees of a run."""

    def __init__(self, error: Exception | None = None) -> None:
        self.started = 0
        self.release = anyio.Event()
        self.error = error

    async def save(self) -> None:
        self.started += 1
        await self.release.wait()
        if self.error is not None:
            raise self.error


async def test_a_streaming_plan_does_not_wait_for_its_saves() -> None:
    run = _SlowSaves()
    async with anyio.create_task_group() as group:
        saves = SaveBehind(run, group)
        saves.want()
        with anyio.fail_after(5):
            while not run.started:
                await anyio.lowlevel.checkpoint()
        for _ in range(5):  # lines keep coming while the save waits: one more is due
            saves.want()
        assert (run.started, saves.running, saves.again) == (1, True, True)
        run.release.set()
    assert run.started == 2, "the lines accepted during the save got one save of their own"
    assert not saves.running and saves.error is None


async def test_a_save_that_fails_while_a_plan_streams_stops_the_plan_with_its_error() -> None:
    run = _SlowSaves(LostRun("run run-x was taken over by planner/other"))
    reading_stopped = False
    async with anyio.create_task_group() as group:
        saves = SaveBehind(run, group)
        saves.want()
        run.release.set()
        try:
            await anyio.sleep_forever()  # the plan's next line, which never comes
        except anyio.get_cancelled_exc_class():
            reading_stopped = True
            raise
    assert reading_stopped
    assert isinstance(saves.error, LostRun)
    with pytest.raises(LostRun, match="taken over"):
        saves.want()
