"""What a deployment is doing right now: its live actors (from their heartbeats) and its
active runs (from the run-state KV bucket), as data: ``plancast status`` prints it.

Collection only reads: it subscribes to heartbeats for a short while and watches the
bucket's latest values, and never creates a stream or a bucket.
"""

from __future__ import annotations

import logging
import time

import anyio
import msgspec

from protocols import (
    UNREADABLE,
    Heartbeat,
    ParentStep,
    RunId,
    RunRecord,
    StepRecord,
    Verb,
    decode,
    run_key,
    runs_bucket,
    subject,
)

from ..bus import BucketNotFoundError, Bus, KeyNotFoundError, NotFoundError, current_values

log = logging.getLogger(__name__)

HEARTBEAT_WINDOWS = 1.5
"""By default heartbeats are collected for this many heartbeat intervals."""


class ActorStatus(msgspec.Struct, frozen=True, kw_only=True):
    """One live actor, as its latest heartbeat describes it."""

    role: str
    """The actor's role."""
    instance: str
    """Its instance id (``host-pid-rand``)."""
    host: str
    """The machine it runs on."""
    pid: int
    """Its process id."""
    in_flight: list[str]
    """Work in hand (``run_id/step_id`` or a subject)."""
    handled: int
    """Messages handled since it started."""
    restarts: int
    """Times its supervisor restarted it."""
    draining: bool
    """True once it stopped taking work before exiting."""
    started_at: float
    """Unix time it started."""
    interval: float
    """Seconds between its heartbeats."""
    last_heartbeat_age: float
    """Seconds since its latest heartbeat arrived here."""
    tools: list[str] = []
    """Tools it may run (MCP servers' included)."""


class RunStatus(msgspec.Struct, frozen=True, kw_only=True):
    """One active run, as the planner holding it last stored it."""

    run_id: str
    """The run."""
    goal: str
    """What the client asked for (in full; tables shorten it)."""
    status: str
    """``active``, ``finished`` or ``failed`` (``plancast status`` lists active ones only)."""
    owner: str
    """The planner instance holding the run's lease."""
    round: int
    """The current plan round."""
    steps_done: int
    """Steps finished successfully."""
    steps_total: int
    """Steps planned so far (across rounds, dropped ones excluded)."""
    lease_remaining: float
    """Seconds until the owner's lease ends unless renewed; negative: it has lapsed."""
    age: float
    """Seconds since the run was accepted."""
    tokens: int = 0
    """Prompt and completion tokens spent so far."""
    tokens_estimated: bool = False
    """Some of ``tokens`` are an estimate made here: the model server reported no usage for
    some call (a stream without usage, a plan cut off)."""
    parent: ParentStep | None = None
    """For a sub-team's run: the parent run's step it answers (a list can nest it there)."""


class DeploymentStatus(msgspec.Struct, frozen=True, kw_only=True):
    """Everything ``plancast status`` shows; ``--json`` prints exactly this."""

    actors: list[ActorStatus]
    """Actors heard from, by role and instance."""
    runs: list[RunStatus]
    """Active runs, oldest first."""


async def collect_actors(bus: Bus, wait: float) -> list[ActorStatus]:
    """Listen to every heartbeat under the bus's prefix for ``wait`` seconds.

    Actors beat every ``heartbeat_interval``, so listening for about 1.5 intervals hears
    each live one at least once; an actor silent that long is not listed.
    """
    latest: dict[tuple[str, str], tuple[Heartbeat, float]] = {}
    sub = await bus.nc.subscribe(subject(bus.prefix, Verb.HEARTBEAT, "*", "*", wildcard=True))
    try:
        with anyio.move_on_after(wait):
            async for msg in sub.messages:
                try:
                    beat: Heartbeat = decode(msg.data, Heartbeat)
                except UNREADABLE as exc:  # ValidationError is a DecodeError
                    log.debug("ignoring a bad heartbeat on %s: %s", msg.subject, exc)
                    continue
                latest[beat.role, beat.instance] = (beat, time.monotonic())
    finally:
        with anyio.CancelScope(shield=True):
            await sub.unsubscribe()
    now = time.monotonic()
    return [
        ActorStatus(
            role=beat.role, instance=beat.instance, host=beat.host, pid=beat.pid,
            in_flight=list(beat.in_flight), handled=beat.handled, restarts=beat.restarts,
            draining=beat.draining, started_at=beat.started_at, interval=beat.interval,
            last_heartbeat_age=now - heard, tools=list(beat.tools),
        )
        for _, (beat, heard) in sorted(latest.items())
    ]


async def read_run(bus: Bus, run_id: str) -> RunRecord | None:
    """A run's stored header; None for an unknown run or an id that cannot be one."""
    try:
        msgspec.convert(run_id, RunId)
        kv = await bus.js.key_value(runs_bucket(bus.prefix))
        entry = await kv.get(run_key(run_id))
        record: RunRecord = decode(entry.value or b"", RunRecord)
    except (msgspec.ValidationError, BucketNotFoundError, KeyNotFoundError, NotFoundError,
            *UNREADABLE):
        return None
    return record


class ChildRun(msgspec.Struct, frozen=True, kw_only=True):
    """A sub-team's run started by one of a run's steps."""

    run_id: str
    """The child run."""
    step_id: int
    """The parent's step it answers."""
    attempt: int
    """That step's attempt (each attempt starts a run of its own)."""
    status: str
    """``active``, ``finished`` or ``failed``."""


async def child_runs(bus: Bus, run_id: str) -> list[ChildRun]:
    """The runs the run's steps started (hierarchical teams), by step and attempt, read
    from the run-state bucket: each names its parent in its request."""
    try:
        kv = await bus.js.key_value(runs_bucket(bus.prefix))
    except (BucketNotFoundError, NotFoundError):
        return []
    children = []
    for entry in (await current_values(kv, "runs.*")).values():
        try:
            record: RunRecord = decode(entry.value, RunRecord)
        except UNREADABLE:
            continue
        parent = record.request.parent
        if parent is not None and parent.run_id == run_id:
            children.append(ChildRun(run_id=record.run_id, step_id=parent.step_id,
                                     attempt=parent.attempt, status=record.status))
    return sorted(children, key=lambda c: (c.step_id, c.attempt, c.run_id))


async def collect_runs(bus: Bus, *, now: float | None = None, active_only: bool = True,
                       limit: int | None = None) -> list[RunStatus]:
    """The runs in the run-state bucket (none if the bucket does not exist yet): the active
    ones oldest first, or with ``active_only=False`` the ``limit`` most recent."""
    try:
        kv = await bus.js.key_value(runs_bucket(bus.prefix))
    except (BucketNotFoundError, NotFoundError):
        log.info("no run-state bucket %s: nothing has run under prefix %r",
                 runs_bucket(bus.prefix), bus.prefix)
        return []
    headers = await current_values(kv, "runs.*")
    records = []
    for key, entry in headers.items():
        try:
            records.append(decode(entry.value, RunRecord))
        except UNREADABLE as exc:
            log.warning("ignoring unreadable run state %s: %s", key, exc)
    if active_only:
        chosen = sorted((r for r in records if r.status == "active"),
                        key=lambda r: (r.started_at, r.run_id))
    else:
        chosen = sorted(records, key=lambda r: (r.started_at, r.run_id), reverse=True)[:limit]
    done: dict[str, set[int]] = {r.run_id: set() for r in chosen}
    for key, entry in (await current_values(kv, "runs.*.steps.*")).items():
        run_id = key.split(".")[1]
        if run_id in done and decode(entry.value, StepRecord).status == "done":
            done[run_id].add(int(key.rsplit(".", 1)[1]))
    now = time.time() if now is None else now
    return [run_status(record, now, done[record.run_id]) for record in chosen]


def run_status(record: RunRecord, now: float, done: set[int]) -> RunStatus:
    """A run's row: its step counts (``done``: ids of finished steps), lease and age."""
    return RunStatus(
        run_id=record.run_id, goal=record.request.goal, status=record.status,
        owner=record.owner, round=record.round,
        steps_done=max(len(done & set(record.order)), record.steps_done),
        steps_total=len(record.order),
        lease_remaining=record.lease_until - now,
        age=now - (record.started_at or record.updated_at or now),
        tokens=record.usage.prompt_tokens + record.usage.completion_tokens,
        tokens_estimated=record.usage.estimated,
        parent=record.request.parent,
    )


async def collect_status(bus: Bus, *, wait: float | None = None) -> DeploymentStatus:
    """Live actors and active runs; ``wait`` defaults to 1.5 heartbeat intervals."""
    if wait is None:
        wait = HEARTBEAT_WINDOWS * bus.settings.heartbeat_interval
    runs = await collect_runs(bus)
    return DeploymentStatus(actors=await collect_actors(bus, wait), runs=runs)
