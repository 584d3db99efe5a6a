"""A short successful result is acknowledged once its events are stored: the run's state
is a checkpoint written every so often, and a planner taking the run over replays the
events since (``resume.fold``, tested in ``test_resume``)."""

from __future__ import annotations

from typing import Any

import anyio
import msgspec
import pytest
from nats.js.errors import NotFoundError

from protocols import (
    RunRecord,
    StepRecord,
    StepStarted,
    Stream,
    decode,
    run_key,
    runs_bucket,
    step_key,
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
    per step, then one per step as it finished), and the run's last state has them all."""
    histories: dict[int, list[bytes]] = {}

    async def last_state(bus: Bus, run_id: str) -> None:
        kv = await bus.js.key_value(runs_bucket(prefix))
        watcher = await kv.watch(run_key(run_id))  # the last save comes after run.finished
        try:
            async for entry in watcher:
                if entry is not None and entry.value and \
                        decode(entry.value, RunRecord).status == "finished":
                    break
        finally:
            await watcher.stop()
        header = decode((await kv.get(run_key(run_id))).value or b"", RunRecord)
        assert header.replayed == [] and header.steps_done == 40
        for sid in range(1, 41):
            histories[sid] = [e.value or b"" for e in await kv.history(step_key(run_id, sid))]

    lines = [plan_line(i, tool="echo", args={"text": f"{i}"}) for i in range(1, 41)]
    out = await run_team(nats_url, prefix, [Rule(role="planner", lines=lines),
                                            finish("done")], after=last_state)
    assert out.answer == "done"
    for sid, history in histories.items():  # one record per step, written once
        assert len(history) == 1, f"step {sid} was written {len(history)} times"
        assert decode(history[0], StepRecord).output == f"{sid}"
    assert sorted(histories) == list(range(1, 41))
