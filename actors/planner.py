"""The planner: takes runs on, owns each one's DAG, and routes what comes back to it.

Each run it owns has a lease in the run-state bucket, renewed while it lives. A run
whose lease ran out (its planner died) is adopted by any planner, which resumes it
from the stored state: finished steps stay finished, steps in flight are awaited.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from collections.abc import Sequence
from typing import Any

import anyio
import msgspec
from anyio.abc import TaskGroup, TaskStatus
from nats.js.errors import KeyWrongLastSequenceError

from protocols import (
    Message,
    ReplanRequest,
    RunAccepted,
    RunRecord,
    RunRequest,
    StepClaimed,
    StepRecord,
    StepResult,
    Stream,
    SynthesisDecision,
    Verb,
    Verdict,
    decode,
    encode,
    run_key,
    runs_bucket,
    step_keys,
    stream_name,
    subject,
)
from runtime.actor import Source, Subscription, WorkQueue, on
from runtime.delivery import Delivery
from runtime.kv import current_values
from runtime.role import RoleActor, RoleContext

from .run import Run
from .run_state import LostRun, RunState, restore

log = logging.getLogger(__name__)

RESULT_TYPES = (StepClaimed, StepResult, Verdict, SynthesisDecision, ReplanRequest)


def new_run_id() -> str:
    return f"run-{secrets.token_hex(6)}"


class Planner(RoleActor):
    """Answers ``<prefix>.run.submit``; pulls ``<prefix>.result.<run>`` for each run it owns."""

    role = "planner"

    def __init__(self, ctx: RoleContext, *, instance: str | None = None) -> None:
        # Handlers are short (a run is a task of its own), so many may be in hand at once.
        super().__init__(ctx, instance=instance, concurrency=max(ctx.role.concurrency, 256))
        self.runs: dict[str, Run] = {}
        self.lease = self.settings.run_lease
        self.owner_id = f"{self.name}/{self.instance}"
        self.kv: Any = None
        self._runs_tg: TaskGroup | None = None

    def sources(self) -> Sequence[Source]:
        return [Subscription(self.bus.subject(Verb.RUN_SUBMIT), queue="planner",
                             accepts=(RunRequest,))]

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        self.kv = await self.bus.js.key_value(runs_bucket(self.bus.prefix))
        self.runs = {}  # after a restart, our old runs come back by lease expiry
        async with anyio.create_task_group() as runs:
            self._runs_tg = runs
            runs.start_soon(self._lease_loop)
            await super().serve(task_status=task_status)
            runs.cancel_scope.cancel()

    # -- taking runs on ------------------------------------------------------------------

    @on(RunRequest)
    async def submit(self, request: RunRequest, delivery: Delivery) -> None:
        run_id = request.run_id or new_run_id()
        record = RunRecord(run_id=run_id, request=request, owner=self.owner_id,
                           lease_until=time.time() + self.lease, started_at=time.time())
        try:
            revision = await self.kv.create(run_key(run_id), encode(record))
        except KeyWrongLastSequenceError:
            log.info("run %s was submitted before; answering as accepted", run_id)
        else:
            self._start(Run(self, await self._restore(record, fresh=True), revision),
                        resumed=False)
        await delivery.respond(RunAccepted(run_id=run_id,
                                           events_subject=self.bus.subject(Verb.EVENT, run_id)))

    @property
    def known_tools(self) -> set[str]:
        """Tools a plan may name: the team's (they may live on the workers only) and ours."""
        return self.ctx.team.tool_names() | set(self.ctx.tools.names())

    async def _restore(self, record: RunRecord, *, fresh: bool = False) -> RunState:
        """The run as stored. Its events go on from the saved ``next_seq``: events sent
        after the last save are sent again under the same numbers (stored ones are
        de-duplicated; one that never got stored fills its gap)."""
        steps: dict[int, StepRecord] = {}
        if not fresh:
            for entry in (await current_values(self.kv, step_keys(record.run_id))).values():
                step = decode(entry.value, StepRecord)
                steps[step.step.id] = step
        return await restore(
            record, steps, known_roles=[r.name for r in self.ctx.team.executors()],
            known_tools=self.known_tools, fetch=self.bus.get_object)

    def _start(self, run: Run, *, resumed: bool) -> None:
        self.runs[run.run_id] = run
        assert self._runs_tg is not None
        self._runs_tg.start_soon(self._drive, run, resumed)

    async def _drive(self, run: Run, resumed: bool) -> None:
        results = await self.add_source(WorkQueue(
            Stream.RESULTS, subject(self.bus.prefix, Verb.RESULT, run.run_id),
            f"run-{run.run_id}", accepts=RESULT_TYPES, ack_wait=self.lease))
        try:
            with anyio.CancelScope() as run.scope:
                await run.drive(resumed=resumed)
        finally:
            results.cancel()
            self.runs.pop(run.run_id, None)
            if run.record.status != "active":
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                    await self.bus.js.delete_consumer(
                        stream_name(self.bus.prefix, Stream.RESULTS), f"run-{run.run_id}")

    # -- what comes back -----------------------------------------------------------------

    @on(*RESULT_TYPES)
    async def outcome(self, message: Message, delivery: Delivery) -> None:
        run = self.runs.get(message.run_id)  # type: ignore[attr-defined]
        if run is None:
            log.info("%s for run %s, which this planner no longer drives; ignored",
                     type(message).__name__, message.run_id)  # type: ignore[attr-defined]
            return
        try:
            await run.receive(message)
        except LostRun:
            run.scope.cancel()
            await delivery.nak()  # the run's new owner will get it

    # -- leases --------------------------------------------------------------------------

    async def _lease_loop(self) -> None:
        """Renew our runs' leases; adopt runs whose planner stopped renewing."""
        while True:
            for run in list(self.runs.values()):
                try:
                    await run.save()
                except LostRun:
                    run.scope.cancel()
            try:
                await self._adopt_orphans()
            except Exception as exc:  # a bus hiccup must not stop lease renewal
                log.warning("looking for orphaned runs failed: %s", exc)
            await anyio.sleep(self.lease / 3)

    async def _adopt_orphans(self) -> None:
        headers = await current_values(self.kv, "runs.*")
        for key, entry in headers.items():
            record = decode(entry.value, RunRecord)
            if record.run_id in self.runs or record.status != "active" \
                    or record.lease_until > time.time():
                continue
            claimed = msgspec.structs.replace(record, owner=self.owner_id,
                                              lease_until=time.time() + self.lease)
            try:
                revision = await self.kv.update(key, encode(claimed), last=entry.revision)
            except KeyWrongLastSequenceError:
                continue  # another planner was quicker
            log.warning("adopting run %s from %s (its lease expired)", record.run_id,
                        record.owner)
            self._start(Run(self, await self._restore(claimed), revision), resumed=True)
