"""The planner: takes runs on, owns each one's DAG, and routes what comes back to it.

Each run it owns has a lease in the run-state bucket, renewed while it lives. A run
whose lease ran out (its planner died, or was cut off) is adopted by any planner, which
first fences the old owner out (``run.owner`` on the run's fence subject: the server
refuses the old owner's events from then on), then resumes the run from its stored state
and the events stored after it: finished steps stay finished, steps in flight are awaited.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from types import MappingProxyType
from typing import Any

import anyio
import msgspec
from anyio.abc import TaskGroup, TaskStatus

from protocols import (
    ActorError,
    Message,
    PlanDecision,
    ReplanRequest,
    RunAccepted,
    RunCancel,
    RunFailed,
    RunOwner,
    RunRecord,
    RunRejected,
    RunRequest,
    StepClaimed,
    StepDecision,
    StepOutcomes,
    StepRecord,
    StepResult,
    Stream,
    SynthesisDecision,
    Verb,
    Verdict,
    WorkError,
    decode,
    encode,
    new_run_id,
    run_key,
    runs_bucket,
    step_keys,
    stream_name,
    stream_of,
    subject,
)
from runtime import telemetry
from runtime.actor import RoleActor, RoleContext, Source, Subscription, WorkQueue, on
from runtime.bus import (
    RETRY_CAP,
    Delivery,
    Fenced,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    consumer_config,
    current_values,
    describe,
    is_transient,
    make_if_missing,
)
from runtime.client import check_plan
from runtime.config import RoleOption, plan_roles, request_problem
from runtime.dag import PlanValidationError
from runtime.models import TEXT_CHARS
from runtime.nonces import Nonces, planners_secret

from . import stores
from .liveness import Liveness
from .run import (
    Run,
    RunEnv,
    RunState,
    RunStore,
    Tail,
    fold,
    planned_steps,
    read_tail,
    restore,
    review_problem,
)

log = logging.getLogger(__name__)

RESULT_TYPES = (StepClaimed, StepResult, StepOutcomes, Verdict, SynthesisDecision,
                ReplanRequest, RunCancel, WorkError, PlanDecision, StepDecision)
READS = 3
"""Times a takeover reads a run's step records until it has every step its header lists."""
NOT_OURS_DELAY = 1.0
"""Seconds before an outcome for a run another planner drives is offered again."""
EARLY_OFFERS, EARLY_DELAY = 4, 0.5
"""A result ahead of its claim is applied again up to this many times, after 0.5 s, 1 s
... (the message that brought it is acknowledged after that)."""
ADMIT_RETRY_FOR = 5.0
"""Seconds a submission's read or store of the run state is tried again through a
passing failure (a leader election takes 4-9 s) before the client is told "retryable"
(it sends the submission again within its own deadline)."""
FULL_GRACE = 1.0
"""Seconds a planner at ``max_active_runs`` waits before refusing a resubmission (which
every planner hears): one with room takes it meanwhile."""



class Planner(RoleActor):
    """Answers ``<prefix>.run.submit``; pulls ``<prefix>.result.<run>.>`` for each run it owns."""

    role = "planner"
    role_options = MappingProxyType({
        "stream_plan": RoleOption(bool, True, "dispatch each step the moment its line "
                                              "arrives; false waits for the whole plan"),
        "plan_text_chars": RoleOption(int, TEXT_CHARS, "longest instruction or tool-argument "
                                      "string a constrained plan may hold (a small model "
                                      "that loops inside strings needs a few hundred)",
                                      minimum=1)})

    def __init__(self, ctx: RoleContext, *, instance: str | None = None) -> None:
        # Handlers are short (a run is a task of its own), so many may be in hand at once.
        super().__init__(ctx, instance=instance, concurrency=max(ctx.role.concurrency, 256))
        self.runs: dict[str, Run] = {}
        self.starting: set[str] = set()
        """Runs taken on whose driver has not finished (``runs`` holds those it took)."""
        self.admitting = 0
        """Submissions past the ``max_active_runs`` check whose record is being stored: they
        count against the limit, so a burst cannot take more than the limit at once."""
        self.listening: dict[str, anyio.Event] = {}
        """Set once the run's results consumer is there (or its driver gave up), by run."""
        self._admissions: dict[str, tuple[anyio.Lock, int]] = {}
        """Per run being submitted: its lock and how many submissions hold or wait for it."""
        self.lease = self.settings.run_lease
        self.owner_id = f"{self.name}/{self.instance}"
        self.kv: Any = None
        self.liveness = Liveness(self.bus, self.owner_id)
        self.nonces = Nonces(planners_secret(self.settings))
        self.env = RunEnv(
            bus=self.bus, team=ctx.team, tools=ctx.tools, config=self.config,
            model_client=lambda: self.model, nonces=self.nonces, liveness=self.liveness,
            name=self.name, instance=self.instance, owner_id=self.owner_id, lease=self.lease)
        """What this planner lends each run it drives."""
        self._runs_tg: TaskGroup | None = None

    def sources(self) -> Sequence[Source]:
        return [Subscription(self.bus.subject(Verb.RUN_SUBMIT), queue="planner",
                             accepts=(RunRequest,)),
                Subscription(self.bus.subject(Verb.RUN_RESUBMIT), accepts=(RunRequest,))]

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        self.kv = await self.bus.js.key_value(runs_bucket(self.bus.prefix))
        self.runs = {}  # after a restart, our old runs come back by lease expiry
        async with anyio.create_task_group() as runs:
            self._runs_tg = runs
            await runs.start(self.liveness.watch)
            runs.start_soon(self._adopt_loop)
            runs.start_soon(stores.watch_results, self.bus, self.ctx.team.timeouts.storage,
                            self.settings.max_message_bytes, lambda: self.runs.values())
            await super().serve(task_status=task_status)
            runs.cancel_scope.cancel()

    # -- taking runs on ------------------------------------------------------------------

    @on(RunRequest)
    async def submit(self, request: RunRequest, delivery: Delivery) -> None:
        """Take the run on, refuse it (the request cannot run), or, when the run state
        cannot be stored now, answer "retryable": never a refusal for a passing failure.

        A resubmission (``run.resubmit``: its first try got no answer) reaches every
        planner; the one that stores the run's record answers, and so does any other once
        the run's results consumer is there (``_keep_outcomes``), whoever drives it."""
        run_id = request.run_id or new_run_id()
        everyone = delivery.subject == self.bus.subject(Verb.RUN_RESUBMIT)
        accepted = RunAccepted(run_id=run_id, events_subject=self.bus.subject(Verb.EVENT, run_id))
        answer: RunAccepted | RunRejected
        try:
            async with self._admitting(run_id):
                decided = await self._answer(request, run_id, everyone=everyone)
            if isinstance(decided, anyio.Event):
                # We drive it: answered once the run's results consumer is there. The
                # results stream keeps only what some consumer reads, so a cancel sent the
                # moment the run is accepted must find it. (Its driver makes it: the run
                # starts at once, its lease running.)
                with anyio.move_on_after(self.lease):
                    await decided.wait()
                decided = accepted
            answer = decided
        except Exception as exc:
            # A record another create holds but a lagging replica cannot show yet: passing too.
            if not is_transient(exc) and not isinstance(exc, KeyNotFoundError):
                raise
            log.warning("run %s could not be stored now (%s); the client sends it again",
                        run_id, describe(exc))
            answer = RunRejected(retryable=True, reason=(
                f"planner {self.owner_id} could not store run {run_id} now "
                f"({describe(exc)}); send it again with the same run id"))
        await delivery.respond(answer)

    @contextlib.asynccontextmanager
    async def _admitting(self, run_id: str) -> AsyncIterator[None]:
        """One submission of a run at a time here: a resubmission that arrives while the
        first is still storing the run waits for it, rather than taking the run on too."""
        lock, waiting = self._admissions.get(run_id, (anyio.Lock(), 0))
        self._admissions[run_id] = (lock, waiting + 1)
        try:
            async with lock:
                yield
        finally:
            lock, waiting = self._admissions[run_id]
            if waiting == 1:
                del self._admissions[run_id]
            else:
                self._admissions[run_id] = (lock, waiting - 1)

    async def _answer(self, request: RunRequest, run_id: str, *,
                      everyone: bool) -> RunAccepted | RunRejected | anyio.Event:
        """The answer to a submission: an event for a run we drive (set once its results
        consumer is there)."""
        if (listening := self.listening.get(run_id)) is not None:
            return listening  # submitted again: nothing to store
        accepted = RunAccepted(run_id=run_id, events_subject=self.bus.subject(Verb.EVENT, run_id))
        if len(self.starting) + self.admitting >= self.ctx.team.max_active_runs:
            if everyone:  # another planner with room may take it: give it a moment
                await anyio.sleep(FULL_GRACE)
            if (known := await self._known(run_id)) is None:
                limit = self.ctx.team.max_active_runs
                if not everyone:  # only we heard it: "retryable" sends it to every planner
                    return RunRejected(retryable=True, reason=(
                        f"planner {self.owner_id} already drives {limit} runs; sent again "
                        "to every planner, one with room takes it"))
                log.warning("run %s refused: %d runs active", run_id, len(self.starting))
                return RunRejected(reason=(
                    f"planner {self.owner_id} already drives {limit} runs (max_active_runs "
                    "in the team file); submit again once some have ended, or start another "
                    "planner"))
            return await self._again(known, accepted)
        problem = (request_problem(self.ctx.team, request)
                   or review_problem(self.ctx.team.review_plan, request.review_plan))
        if problem:
            return RunRejected(reason=problem)
        if request.plan is not None:  # a saved plan: checked like a model's, before it runs
            try:
                check_plan(request.plan, self.ctx.team, self.known_tools,
                           max_steps=request.max_steps)
            except PlanValidationError as exc:
                return RunRejected(reason=f"the given plan cannot run on this team: {exc}")
        now = time.time()
        timeout = request.timeout or self.ctx.team.timeouts.run
        record = RunRecord(run_id=run_id, request=request, owner=self.owner_id,
                           lease_until=now + self.lease, started_at=now,
                           deadline=now + timeout if timeout else 0.0)
        try:
            self.admitting += 1
            try:
                revision = await self._create(record)
            finally:
                self.admitting -= 1
        except KeyWrongLastSequenceError:
            log.info("run %s was submitted before", run_id)
            known = await self._known(run_id)
            return accepted if known is None else \
                await self._again(known, accepted)
        return self._start(record, revision, adopted=False)

    async def _create(self, record: RunRecord) -> int:
        """Store a new run's record; passing failures are tried again for
        ``ADMIT_RETRY_FOR`` seconds. A create whose answer was lost and that a retry then
        finds stored is ours: its revision is returned."""
        key, tried = run_key(record.run_id), False
        delay, deadline = 0.05, anyio.current_time() + ADMIT_RETRY_FOR
        while True:
            try:
                revision: int = await self.kv.create(key, encode(record))
                return revision
            except KeyWrongLastSequenceError as exc:
                if tried:
                    # A replica behind the others may not have it yet: then it is not ours.
                    with contextlib.suppress(KeyNotFoundError):
                        entry = await self.kv.get(key)
                        if entry.value == encode(record):  # our own create, answered late
                            return int(entry.revision)
                raise exc
            except Exception as exc:
                if not is_transient(exc) or anyio.current_time() + delay > deadline:
                    raise
                log.info("storing run %s failed (%s); trying again", record.run_id,
                         describe(exc))
            tried = True
            await anyio.sleep(delay)
            delay = min(delay * 2, RETRY_CAP)

    async def _again(self, known: tuple[RunRecord, int],
                     accepted: RunAccepted) -> RunAccepted | anyio.Event:
        """The answer for a run submitted before: accepted once its results consumer is
        there (if we drive it: the event). An active run that is ours but that we do not
        drive (a create answered too late, a take that failed) is taken on again now."""
        record, revision = known
        listening = self.listening.get(record.run_id)
        if listening is None and record.status == "active" and record.owner == self.owner_id:
            listening = await self._take_back(record, revision) \
                or self.listening.get(record.run_id)
        if listening is not None:
            return listening
        if record.status == "active":
            await self._keep_outcomes(record.run_id)
        return accepted

    async def _keep_outcomes(self, run_id: str) -> None:
        """Make sure an active run another planner drives has its results consumer before
        its submitter hears "accepted": the results stream keeps only what some consumer
        reads, so a cancel sent the moment after must find one. Its driver may not have
        made it yet, or may be cut off or stopped (chaos seed 51: the only planner that
        could answer was partitioned past the submitter's deadline). The driver binds to
        the consumer made here; one made as the run ended is removed again."""
        queue = self._outcomes(run_id)
        if not await make_if_missing(self.bus, queue, consumer_config(queue, self.settings)):
            return
        known = await self._known(run_id)
        if known is None or known[0].status != "active":
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await self.bus.js.delete_consumer(
                    stream_name(self.bus.prefix, Stream.RESULTS), queue.consumer)

    async def _take_back(self, record: RunRecord, revision: int) -> anyio.Event | None:
        """Drive a run of ours that nobody drives; None if its record changed meanwhile
        (another planner adopted it)."""
        claimed = msgspec.structs.replace(record, lease_until=time.time() + self.lease)
        try:
            revision = await self.kv.update(run_key(record.run_id), encode(claimed),
                                            last=revision)
        except KeyWrongLastSequenceError:
            return None
        log.warning("run %s is ours but nobody drives it (a late answer to its create, or a "
                    "take that failed); taking it on again", record.run_id)
        return self._start(claimed, revision, adopted=True, previous=self.owner_id)

    async def _known(self, run_id: str) -> tuple[RunRecord, int] | None:
        """The record of ``run_id`` and its revision if it was submitted before, else None
        (passing failures to read it are tried again for ``ADMIT_RETRY_FOR`` seconds)."""
        delay, deadline = 0.05, anyio.current_time() + ADMIT_RETRY_FOR
        while True:
            try:
                entry = await self.kv.get(run_key(run_id))
                record: RunRecord = decode(entry.value, RunRecord)
                return record, int(entry.revision)
            except KeyNotFoundError:
                return None
            except Exception as exc:
                if not is_transient(exc) or anyio.current_time() + delay > deadline:
                    raise
            await anyio.sleep(delay)
            delay = min(delay * 2, RETRY_CAP)

    @property
    def known_tools(self) -> set[str]:
        """Tools a plan may name: the team's (they may live on the workers only) and ours."""
        return self.env.known_tools

    def _start(self, record: RunRecord, revision: int, *, adopted: bool,
               previous: str = "") -> anyio.Event:
        """Drive the run in a task of its own; the event is set once the run's results
        consumer is there (or its driver gave up)."""
        assert self._runs_tg is not None
        self.starting.add(record.run_id)
        listening = self.listening[record.run_id] = anyio.Event()
        self._runs_tg.start_soon(self._drive, record, revision, adopted, previous, listening)
        return listening

    async def _take(self, record: RunRecord, revision: int, adopted: bool,
                    previous: str) -> Run:
        """Fence the run for us, then read back where it stands."""
        fence = await self.bus.publish_durable(
            self.bus.subject(Verb.FENCE, record.run_id),
            RunOwner(run_id=record.run_id, owner=self.owner_id, ts=time.time()))
        state = await self._restore(record, fresh=not adopted)
        tail: Tail | None = None
        if adopted:  # the fence is up: nothing more can be added behind our back
            positions: dict[int, int] = {}
            events = await read_tail(self.bus, record.run_id, record.events_seq, positions)
            tail = fold(state, events, next_seq=record.next_seq, nonces=self.nonces,
                        replayed=frozenset(record.replayed))
            tail.positions = positions
            state.scheduler.reorder(record.order)
        store = RunStore(self.bus, self.kv, record.run_id, revision,
                         retry_for=self.bus.settings.publish_retry_for)
        return Run(self.env, state, store, fence=fence, tail=tail, previous_owner=previous)

    async def _restore(self, record: RunRecord, *, fresh: bool) -> RunState:
        steps: dict[int, StepRecord] = {}
        for _ in range(0 if fresh else READS):
            for entry in (await current_values(self.kv, step_keys(record.run_id))).values():
                step = decode(entry.value, StepRecord)
                steps[step.step.id] = step
            recorded = set(record.order) - set(record.replayed)  # the rest are in the log
            if recorded <= steps.keys():
                break
        else:
            if not fresh:  # a step the header lists has no record: rebuild it from the log
                steps |= await planned_steps(self.bus, record, recorded - steps.keys())
        return await restore(
            record, steps, known_roles=[r.name for r in plan_roles(
                self.ctx.team, record.request, self.config)],
            known_tools=self.known_tools, fetch=self.bus.get_object)

    async def _drive(self, record: RunRecord, revision: int, adopted: bool,
                     previous: str, listening: anyio.Event) -> None:
        """Own one run until it ends or is lost; never raises (other runs go on)."""
        try:
            await self._own(record, revision, adopted, previous, listening)
        finally:
            listening.set()
            self.starting.discard(record.run_id)
            if self.listening.get(record.run_id) is listening:
                del self.listening[record.run_id]

    async def _own(self, record: RunRecord, revision: int, adopted: bool,
                   previous: str, listening: anyio.Event) -> None:
        run_id = record.run_id
        try:
            run = await self._take(record, revision, adopted, previous)
        except Exception as exc:  # its lease runs out and another planner (or we) retry
            log.warning("could not take run %s on (%s); it is adopted once its lease ends",
                        run_id, exc)
            return
        self.runs[run_id] = run
        try:
            results = await self.add_source(self._outcomes(run_id))
            listening.set()
            try:
                with run.scope:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(run.watch)
                        tg.start_soon(run.events.write_behind)
                        tg.start_soon(self._keep_lease, run)
                        await run.drive(resumed=adopted)
                        tg.cancel_scope.cancel()
            finally:
                results.cancel()
        except Exception:
            log.exception("run %s: its planner task failed; the run is adopted once its "
                          "lease ends", run_id)
        finally:
            self.runs.pop(run_id, None)
            _trace_end(run)
            if run.record.status != "active":
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                    await self.bus.js.delete_consumer(
                        stream_name(self.bus.prefix, Stream.RESULTS), f"run-{run_id}")

    # -- what comes back -----------------------------------------------------------------

    def _outcomes(self, run_id: str) -> WorkQueue:
        """The run's own consumer of the results stream: ``result.<run>.>``."""
        return WorkQueue(
            Stream.RESULTS, subject(self.bus.prefix, Verb.RESULT, run_id, ">", wildcard=True),
            f"run-{run_id}", accepts=RESULT_TYPES, ack_wait=self.lease, max_deliver=-1,
            provisioned=False)

    def object_limit(self, delivery: Delivery) -> int | None:
        """A role's outcome by reference may be at most its ``max_object_bytes``."""
        if stream_of(self.bus.prefix, delivery.subject) is not Stream.RESULTS:
            return None
        return self.object_limit_of(delivery.subject.rsplit(".", 1)[-1])

    def object_limit_of(self, role: str) -> int | None:
        """Most bytes ``role`` may send by reference (None: the deployment's limit)."""
        return self.env.object_limit_of(role)

    @on(*RESULT_TYPES)
    async def outcome(self, message: Message, delivery: Delivery) -> None:
        *_, subject_run, sender = delivery.subject.split(".")  # result.<run>.<role>
        named: str = message.run_id  # type: ignore[attr-defined]
        run = self.runs.get(subject_run)
        if run is not None and named != subject_run:
            await run.refuse(message, f"it names run {named!r}: an outcome travels on its "
                             "own run's subject", sender=sender, role=sender)
            return
        if run is None:
            await self._not_ours(subject_run, message, delivery)
            return
        if run.record.status != "active":
            await self._too_late(message, delivery, "has ended")
            return
        messages: Sequence[Message] = message.outcomes \
            if isinstance(message, StepOutcomes) else [message]
        offers = delivery.deliveries
        try:
            while messages := await run.receive(messages, sender,
                                                patient=offers < EARLY_OFFERS):
                # Results ahead of their claims (a claim can be stored late when its
                # stream fails over): offered again shortly rather than refused now.
                await anyio.sleep(EARLY_DELAY * offers)
                offers += 1
        except Fenced:
            run.scope.cancel()
            await delivery.nak()  # the run's new owner will get it

    async def refuse(self, delivery: Delivery, reason: str) -> None:
        """An outcome that cannot be read (not JSON, invalid, oversized, a reference that
        cannot be fetched): a dead letter and our own report, and, like any refused
        outcome, the run's ``outcome.refused`` event and the sender's error subject."""
        await super().refuse(delivery, reason)
        if stream_of(self.bus.prefix, delivery.subject) is not Stream.RESULTS:
            return
        *_, run_id, sender = delivery.subject.split(".")  # result.<run>.<role>
        kind = _kind_of(delivery.data)
        run = self.runs.get(run_id)
        try:
            if run is not None and run.record.status == "active":
                await run.refuse(kind, reason, sender=sender, role=sender)
                return
            await self.bus.publish(self.bus.subject(Verb.ERROR, sender), ActorError(
                role=self.name, instance=self.instance, subject=delivery.subject,
                reason=f"{kind} refused: {reason}", size=delivery.size, ts=time.time()))
        except Exception as exc:  # a courtesy: the dead letter and our report stand
            log.warning("could not tell %s of a refused outcome: %s", sender, exc)

    async def _not_ours(self, run_id: str, message: Message, delivery: Delivery) -> None:
        """An outcome on the subject of a run this planner does not drive (any more): back
        to whoever does, or, for a run that has ended, said to have come too late."""
        try:
            entry = await self.kv.get(run_key(run_id))
        except KeyNotFoundError:
            await self._too_late(message, delivery, "was never submitted")
            return
        if decode(entry.value, RunRecord).status == "active":
            await delivery.nak(delay=NOT_OURS_DELAY)
            return
        await self._too_late(message, delivery, "has ended")

    async def _too_late(self, message: Message, delivery: Delivery, why: str) -> None:
        """The run's events are closed (or it has none): say so to the sender, on its
        role's error subject, and discard the outcome."""
        tag = msgspec.inspect.type_info(type(message)).tag  # type: ignore[attr-defined]
        run_id = message.run_id  # type: ignore[attr-defined]
        reason = f"{tag} for run {run_id}, which {why}: it changes nothing"
        log.info(reason)
        sender = delivery.subject.rsplit(".", 1)[-1]
        with contextlib.suppress(Exception):  # a courtesy: the outcome is discarded anyway
            await self.bus.publish(self.bus.subject(Verb.ERROR, sender), ActorError(
                role=self.name, instance=self.instance, subject=delivery.subject,
                reason=reason, size=delivery.size, ts=time.time()))

    # -- leases --------------------------------------------------------------------------

    async def _keep_lease(self, run: Run) -> None:
        """Renew one run's lease while it lives: each run on its own, so a save that waits
        out a failover never holds up the others' renewals (they would be taken over)."""
        while True:
            await anyio.sleep(self.lease / 3)
            try:
                await run.save()
            except Fenced:
                run.scope.cancel()
                return
            except Exception as exc:  # a bus hiccup: try again at the next renewal
                log.warning("renewing the lease of run %s failed: %s", run.run_id, exc)

    async def _adopt_loop(self) -> None:
        """Adopt runs whose planner stopped renewing their lease."""
        while True:
            try:
                await self._adopt_orphans()
            except Exception as exc:
                log.warning("looking for orphaned runs failed: %s", exc)
            await anyio.sleep(self.lease / 3)

    async def _adopt_orphans(self) -> None:
        headers = await current_values(self.kv, "runs.*")
        for key, entry in headers.items():
            record = decode(entry.value, RunRecord)
            if record.run_id in self.starting or record.status != "active" \
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
            self._start(claimed, revision, adopted=True, previous=record.owner)


def _kind_of(data: bytes) -> str:
    """The type tag an unreadable outcome claims to be, for its refusal."""
    try:
        kind = msgspec.json.decode(data).get("type")
    except Exception:
        return "unreadable"
    return kind if isinstance(kind, str) and len(kind) <= 64 else "unreadable"


def _trace_end(run: Run) -> None:
    """Record the run's span if it ended here (a run lost to another planner is its)."""
    if run.record.status == "active":
        return
    error = ""
    if run.record.status == "failed":
        ended = run.tail.terminal
        error = (run.failure.cause or run.failure.stage) if run.failure is not None \
            else (ended.cause or ended.stage) if isinstance(ended, RunFailed) else "failed"
    telemetry.record_run(run.run_id, goal=run.request.goal, started_at=run.record.started_at,
                         usage=run.usage, error_type=error, description=run.record.outcome)
