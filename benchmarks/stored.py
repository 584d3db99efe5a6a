"""Messages stored per step: each stream's message counter (its last sequence, which counts
every message ever stored, even those a work queue or an interest stream has removed since)
and the account's JetStream API calls, read before and after a workload.

What a reader compares with the floor: a no-op step's task, its outcome, the events that
tell it, the records of its finished attempt, and the run-state writes it causes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import anyio

from protocols import (
    RunRecord,
    Stream,
    Verb,
    decode,
    objects_bucket,
    run_key,
    runs_bucket,
    stream_name,
    subject,
)
from runtime.bus import Bus

KINDS = ("tasks", "outcomes", "events", "fences", "finished", "state", "objects", "errors")
"""What each counter holds: step/review/synthesis tasks (WORK), claims and results
(RESULTS), event messages and run-ownership fences (EVENTS), finished-attempt records
(FINISHED), run-state writes (the runs KV bucket), large payloads (the object store) and
error reports (ERRORS, DEAD)."""


@dataclass(frozen=True)
class Stored:
    """The counters at one moment."""

    counts: Mapping[str, int]
    api_calls: int

    def since(self, before: Stored) -> dict[str, int]:
        """Messages stored per kind between ``before`` and now, and ``api`` calls."""
        delta = {k: self.counts.get(k, 0) - before.counts.get(k, 0) for k in KINDS}
        delta["api"] = self.api_calls - before.api_calls
        return delta


async def stored(bus: Bus) -> Stored:
    """The counters now (each one stream_info call, and an account_info one)."""
    prefix, js = bus.prefix, bus.js

    async def last(stream: str, filter_: str | None = None) -> int:
        try:
            info = await js.stream_info(stream, subjects_filter=filter_)
        except Exception:  # not provisioned (an object store nobody wrote to yet)
            return 0
        if filter_ is None:
            return int(info.state.last_seq or 0)
        return sum((info.state.subjects or {}).values())

    events = stream_name(prefix, Stream.EVENTS)
    counts = {
        "tasks": await last(stream_name(prefix, Stream.WORK)),
        "outcomes": await last(stream_name(prefix, Stream.RESULTS)),
        "fences": await last(events, subject(prefix, Verb.FENCE, ">", wildcard=True)),
        "finished": await last(stream_name(prefix, Stream.FINISHED)),
        "state": await last(f"KV_{runs_bucket(prefix)}"),
        "objects": await last(f"OBJ_{objects_bucket(prefix)}"),
        "errors": await last(stream_name(prefix, Stream.ERRORS))
        + await last(stream_name(prefix, Stream.DEAD)),
    }
    counts["events"] = await last(events) - counts["fences"]
    api = (await js.account_info()).api.total
    return Stored(counts, int(api))


def per_step(delta: Mapping[str, int], steps: int) -> dict[str, float]:
    """Messages stored per step of each kind, and in all (``total``)."""
    row = {k: delta.get(k, 0) / steps for k in KINDS}
    row["total"] = sum(delta.get(k, 0) for k in KINDS) / steps
    row["api"] = delta.get("api", 0) / steps
    return row


async def ended(bus: Bus, run_ids: Iterable[str], *, timeout: float = 30.0) -> None:
    """Until each run's last state is written (its header says it ended): a run's end
    event comes before its last save, whose writes count too."""
    kv = await bus.js.key_value(runs_bucket(bus.prefix))
    with anyio.fail_after(timeout):
        for run_id in run_ids:
            watcher = await kv.watch(run_key(run_id))
            try:
                async for entry in watcher:
                    if entry is not None and entry.value \
                            and decode(entry.value, RunRecord).status != "active":
                        break
            finally:
                await watcher.stop()
