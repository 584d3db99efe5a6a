"""What a run stores, message by message: the exact count for a small no-op chain (the
overhead suite reports the same counters per step, ``benchmarks.stored``), and an ended
run's step records, several to an entry, still readable once its events are gone."""

from __future__ import annotations

import pytest

from benchmarks.stored import Stored, ended, stored
from protocols import (
    OutcomeRefused,
    RunRecord,
    Step,
    StepFinished,
    StepRecord,
    StepRecords,
    StepResult,
    StepTask,
    Stream,
    Verb,
    decode,
    ended_key,
    run_key,
    runs_bucket,
    step_keys,
    stream_name,
)
from runtime.bus import Bus
from runtime.client import follow, step_output
from runtime.testing import Rule

from .harness import NONCES, echo, finish, plan_line, run_team

pytestmark = pytest.mark.anyio

STEPS = 6


def chain(steps: int) -> list[str]:
    return [echo(i, f"out {i}", depends_on=[i - 1] if i > 1 else []) for i in range(1, steps + 1)]


EXACT = {"claim_after": 60.0, "event_batch": 1, "outcome_batch": 1, "run_lease": 60.0}
"""Settings under which the counts do not depend on timing, however busy the machine:
every step ends before its claim is due (the result claims it), every event and outcome
travels alone (batched, a moment's go together: the overhead suite shows those), and no
lease renewal writes the state meanwhile."""


async def count_chain(nats_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch,
                      **options: object) -> dict[str, int]:
    """Messages stored by a run of a no-op chain of ``STEPS`` steps, by kind; with the
    plan's lines saved once however slowly they arrive."""
    monkeypatch.setattr("actors.run.plan.SAVE_PERIOD", 3600.0)
    counted: dict[str, int] = {}

    async def after(bus: Bus, run_id: str) -> None:
        await ended(bus, [run_id])  # the last state is written after the end event
        counted.update((await stored(bus)).since(Stored({}, 0)))

    out = await run_team(nats_url, prefix, [Rule(role="planner", lines=chain(STEPS)),
                                            finish("done")], after=after, settings=EXACT,
                         **options)  # type: ignore[arg-type]
    assert out.answer == "done"
    assert [out.finished(sid).output for sid in range(1, STEPS + 1)] == \
        [f"out {sid}" for sid in range(1, STEPS + 1)]
    assert len(out.events) == 4 * STEPS + 6  # planned, dispatched, started, finished; the run's
    del counted["api"]  # requests, not stored: pull requests vary with timing
    return counted


async def test_a_no_op_chain_stores_these_messages_exactly(
    nats_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per step: its task, its result (the claim rides in it), its four events and its
    finished attempt's two records (the claim-first write, then the result,
    ``actors.finished``). Per run: the synthesis task and decision, six events (started,
    plan started and finished, two usages, the end), the fence, and six run-state writes:
    five headers (submitted, taken, plan closed, synthesis asked, ended) and one entry
    holding every step's record (a record per step before)."""
    counted = await count_chain(nats_url, prefix, monkeypatch)
    assert counted == {"tasks": STEPS + 1, "outcomes": STEPS + 1, "events": 4 * STEPS + 6,
                       "fences": 1, "finished": 2 * STEPS, "state": 6, "objects": 0,
                       "errors": 0}


async def test_a_tool_with_no_effects_leaves_no_record_of_finished_attempts(
    nats_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``effects = "none"``: running the tool again harms nothing, so its executor writes
    no record of the attempt (neither the claim-first write nor the result)."""
    counted = await count_chain(nats_url, prefix, monkeypatch,
                                tool_config={"echo": {"effects": "none"}})
    assert counted == {"tasks": STEPS + 1, "outcomes": STEPS + 1, "events": 4 * STEPS + 6,
                       "fences": 1, "finished": 0, "state": 6, "objects": 0, "errors": 0}


async def test_a_tool_with_no_effects_runs_again_for_a_second_task_and_counts_once(
    nats_url: str, prefix: str
) -> None:
    """With no record, a second task of a finished attempt (as a takeover may send) runs
    the tool again, harmlessly: its answer is refused as a second one, and the step has
    one outcome."""
    async def resend(bus: Bus, run_id: str) -> None:
        async for event in follow(bus, run_id):
            if isinstance(event, StepFinished) and event.step_id == 1:
                step = Step(id=1, role="worker", tool="echo", args={"text": "out 1"})
                await bus.publish_durable(bus.subject(Verb.STEP, "worker"), StepTask(
                    run_id=run_id, goal="test goal", step=step, effects="none",
                    nonce=NONCES.task(run_id, 1, 1)), msg_id=f"{run_id}/1/1/again")
                return

    sent: list[object] = []
    out = await run_team(nats_url, prefix, [
        Rule(role="planner", lines=[echo(1, "out 1"),
                                    plan_line(2, tool="sleep", args={"seconds": 3},
                                              depends_on=[1])]),
        finish("done")], during=resend, outcomes=sent,
        tool_config={"echo": {"effects": "none"}})
    assert out.answer == "done"
    ran = [r for r in sent if isinstance(r, StepResult) and r.step_id == 1]
    assert len(ran) == 2 and all(r.ok and r.output == "out 1" for r in ran)  # ran twice
    assert [e.step_id for e in out.of(StepFinished)] == [1, 2]  # one outcome each
    [refused] = [e for e in out.of(OutcomeRefused) if e.step_id == 1]
    assert "a second answer to attempt 1 of step 1" in refused.reason


async def test_an_ended_runs_step_records_share_entries_and_outlive_its_events(
    nats_url: str, prefix: str
) -> None:
    """Steps whose events said all get no record of their own while the run goes on; its
    last state writes theirs several to an entry, once, and a reader finds a step's output
    there when the run's events have aged out."""
    seen: dict[str, object] = {}

    async def after(bus: Bus, run_id: str) -> None:
        await ended(bus, [run_id])
        bucket = runs_bucket(prefix)
        kv = await bus.js.key_value(bucket)
        head = decode((await kv.get(run_key(run_id))).value or b"", RunRecord)
        info = await bus.js.stream_info(f"KV_{bucket}",
                                        subjects_filter=f"$KV.{bucket}.{step_keys(run_id)}")
        entry = decode((await kv.get(ended_key(run_id, 0))).value or b"", StepRecords)
        records = [decode(bytes(raw), StepRecord) for raw in entry.records]
        seen.update(ended=head.ended, own=info.state.subjects or {},
                    records={r.step.id: (r.status, r.output) for r in records})
        await bus.js.purge_stream(stream_name(prefix, Stream.EVENTS))  # as if aged out
        seen["outputs"] = {sid: await step_output(bus, run_id, sid)
                           for sid in range(1, STEPS + 1)}

    out = await run_team(nats_url, prefix, [Rule(role="planner", lines=chain(STEPS)),
                                            finish("done")], after=after)
    assert out.answer == "done"
    assert seen["ended"] == 1 and seen["own"] == {}
    assert seen["records"] == {sid: ("done", f"out {sid}") for sid in range(1, STEPS + 1)}
    assert seen["outputs"] == {sid: f"out {sid}" for sid in range(1, STEPS + 1)}
