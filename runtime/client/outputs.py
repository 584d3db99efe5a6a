"""A step's whole output, for a reader that was shown its preview.

``event.step.finished`` carries the first ``PREVIEW`` characters of an output; the whole
of it is in the step's record in the run-state bucket, inline when small, else in the
object store (the run's ``state.<run_id>`` space), fetched within the deployment's
``PLANCAST_MAX_OBJECT_BYTES``. A step with no record yet (a planner records some steps
only at the run's end, several to an ``ended`` entry) has its finished event's output.
"""

from __future__ import annotations

import msgspec

from protocols import (
    UNREADABLE,
    RunRecord,
    StepFinished,
    StepRecord,
    StepRecords,
    decode,
    ended_key,
    run_key,
    runs_bucket,
    state_space,
    step_key,
)

from ..bus import BucketNotFoundError, Bus, KeyNotFoundError, NotFoundError
from .runs import events_so_far


async def step_output(bus: Bus, run_id: str, step_id: int) -> str | None:
    """The output of the step's latest successful attempt; None if it has none (yet)."""
    record = await step_record(bus, run_id, step_id)
    if record is not None and record.status == "done":
        if record.output is not None:
            return record.output
        if record.output_ref is not None:
            data = await bus.get_object(record.output_ref, space=state_space(run_id))
            return data.decode(errors="replace")
    finished = [e for e in await events_so_far(bus, run_id)
                if isinstance(e, StepFinished) and e.step_id == step_id]
    return finished[-1].output if finished else None


_MISSING = (BucketNotFoundError, KeyNotFoundError, NotFoundError, msgspec.ValidationError,
            *UNREADABLE)


async def step_record(bus: Bus, run_id: str, step_id: int) -> StepRecord | None:
    """The step's record: under its own key, else (an ended run) in an ``ended`` entry;
    None if it has none (a step of an active run whose events say all)."""
    try:
        kv = await bus.js.key_value(runs_bucket(bus.prefix))
    except _MISSING:
        return None
    try:
        record: StepRecord = decode((await kv.get(step_key(run_id, step_id))).value or b"",
                                    StepRecord)
        return record
    except _MISSING:
        pass
    try:
        ended = decode((await kv.get(run_key(run_id))).value or b"", RunRecord).ended
    except _MISSING:
        return None
    for number in range(ended):
        try:
            entry = decode((await kv.get(ended_key(run_id, number))).value or b"",
                           StepRecords)
        except _MISSING:
            continue
        for raw in entry.records:
            try:
                found: StepRecord = decode(bytes(raw), StepRecord)
            except (msgspec.ValidationError, *UNREADABLE):
                continue
            if found.step.id == step_id:
                return found
    return None
