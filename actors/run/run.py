"""The life of one run, owned by a planner: plan (streamed), dispatch, review, join, replan.

Every state change goes through ``lock`` so outcomes arriving while the plan is still
streaming see a consistent DAG, and every change is an event, in order. The run waits on
one thing at a time (its steps, a synthesis), and anything that ends the wait early (a
replan request, a failure, a deadline in ``timers``) wakes it. A step's transitions
(dispatched, done, failed, forgotten) are ``steps``', writing the run down (and its end)
``save``'s. What the planner lends the run is its ``env``; what the policies may use of
the run is ``RunOps`` (``_api``), which ``Run`` provides.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import anyio

from protocols import (
    Message,
    Plan,
    PlanDecision,
    ReplanRequest,
    ReplanStarted,
    RunResumed,
    SynthesisDecision,
    SynthesisTask,
    Usage,
    UsageRecorded,
)
from runtime import telemetry
from runtime.bus import TRANSIENT, Fenced, StorageFull
from runtime.config import ModelConfigError
from runtime.dag import StepState, StepStateError
from runtime.models import ModelError

from . import delegation, outcomes, review, save, steps, timers
from .env import RunEnv
from .event_log import EventLog, identity, identity_of
from .plan import plan_round
from .resume import Tail
from .save import RunSaver
from .state import RunFailure, RunState, RunStore

log = logging.getLogger(__name__)

class Run:
    """One run, driven by the planner that holds its lease."""

    def __init__(self, env: RunEnv, state: RunState, store: RunStore, *, fence: int,
                 tail: Tail | None = None, previous_owner: str = "") -> None:
        self.env = env
        """What the planner driving the run lends it (``env``)."""
        record = state.record
        self.run_id = record.run_id
        self.request = record.request
        self.record = record
        self.scheduler = state.scheduler
        self.meta = state.meta
        self.fence = fence
        self.tail = tail or Tail(last_seq=record.next_seq - 1)
        self.previous_owner = previous_owner
        self.events = EventLog(env.bus, self.run_id, next_seq=self.tail.last_seq + 1,
                               fence=fence)
        self.events.stored_at.update(self.tail.positions)
        saved = {identity_of(k) for k in record.announced}  # from an earlier takeover
        self.events.announced = self.tail.announced | saved
        self.told = self.tail.told | saved
        """Outcomes a previous owner announced: their late duplicates pass without a word."""
        self.review_mode = review.review_mode(env.team.review_plan, self.request.review_plan)
        """``off``, or who approves each plan round before it runs: the team's, else the
        request's (``review``)."""
        self.awaiting: tuple[int, str] | None = None
        """The round and digest of the plan awaiting approval, while one does."""
        self.plan_decision: PlanDecision | None = None
        self.decided = anyio.Event()
        """Set when a decision on the awaiting plan has been accepted."""
        self.gates: dict[int, tuple[int, float]] = {}
        """Steps held at their approval gate: the attempt waiting, and until when."""
        self.passed: set[tuple[int, int]] = set()
        """Step attempts a person approved."""
        self.usage = self.tail.usage or record.usage
        self.plan_closed = record.plan_closed
        self.synthesis_round = record.synthesis_round
        self.round_reason = record.round_reason
        self.lock = anyio.Lock(fast_acquire=True)
        self.replan: ReplanRequest | None = None
        """A request for a new round that arrived while the run waited."""
        self.decision: SynthesisDecision | None = None
        self.synthesis_since = 0.0
        """Unix time the synthesis was asked for; 0 while the run waits for nothing else."""
        self.failure: RunFailure | None = None
        self.refused = 0
        """Outcomes refused with an event (``outcomes.refuse``): past a bound, only logged."""
        self.scope = anyio.CancelScope()
        """Cancelled when the run is lost to another planner."""
        self._work = anyio.CancelScope()
        self._changed = anyio.Event()
        self.republish = dict(self.tail.republish)
        """Tasks the log shows dispatched, to send again once their inputs are known."""
        self.saver = RunSaver(self, store)

    # -- the run, top to bottom ----------------------------------------------------------

    async def drive(self, *, resumed: bool = False) -> None:
        with self._work:
            try:
                await self._life(resumed)
            except Fenced:
                log.warning("run %s was taken over by another planner; stopping here",
                            self.run_id)
                return
            except RunFailure as failure:
                self.failure = self.failure or failure
            except TRANSIENT as exc:  # the bus stayed away past every retry
                log.warning("run %s: the bus is unavailable (%s); its planner lets it go and "
                            "it is adopted once its lease ends", self.run_id, exc)
                return
            except ModelConfigError as exc:  # the same request would fail again
                self.failure = RunFailure("plan", str(exc), "config")
            except ModelError as exc:
                self.failure = RunFailure("plan", f"the planner's model failed: {exc}", "model")
            except StorageFull as exc:
                self.failure = RunFailure("runtime", str(exc), "storage")
            except Exception as exc:
                log.exception("run %s crashed", self.run_id)
                self.failure = RunFailure("runtime", f"{type(exc).__name__}: {exc}", "crash")
        if self.failure is not None and self.record.status == "active":
            await save.fail(self, self.failure)

    def abort(self, failure: RunFailure) -> None:
        """End the run with this failure, whatever it is waiting on."""
        if self.failure is None:
            self.failure = failure
        self._work.cancel()

    async def _life(self, resumed: bool) -> None:
        req = self.request
        if self.tail.terminal is not None:  # it ended; only its state was not saved yet
            await save.record_end(self, self.tail.terminal)
            return
        fresh = self.events.next_seq == 1
        if fresh:
            await self.events.emit(delegation.run_started(self))
        elif resumed:
            await self.events.emit(RunResumed(run_id=self.run_id, planner=self.env.owner_id,
                                              previous=self.previous_owner,
                                              skipped=self.tail.skipped))
        async with self.lock:  # send what the log says was sent, and what is ready
            await steps.republish_ready(self)
            self.scheduler.promote()
            if not self.holding:  # held steps wait for their round's approval
                await steps.dispatch(self, self.scheduler.ready())
            steps.round_over(self)
        if not fresh or req.plan is not None:
            await self.save()  # a fresh run's model plan saves it while the model answers
        while True:
            round_ = self.scheduler.round
            if not self.plan_closed:
                await plan_round(self, round_, self.round_reason)
            await self._until(lambda: self.scheduler.closed and self.scheduler.is_done())
            async with self.lock:  # a step that waits on nothing must not be left behind
                stray = self.scheduler.promote()
                await steps.dispatch(self, stray)
                steps.check_abort(self)  # also for a failure a previous owner recorded
            if stray and self.replan is None:
                continue
            reason, source = self._why_replan()
            if not reason:
                decision = await self._synthesize(req.max_replans - round_)
                if decision is not None and decision.action == "finish":
                    await save.finish(self, decision.answer)
                    return
                reason, source = (decision.reason or "the synthesizer asked", "synthesizer") \
                    if decision is not None else self._why_replan()
            if round_ >= req.max_replans:
                raise RunFailure("execute", f"no replans left; last reason: {reason}",
                                 "no_replans")
            async with self.lock:
                dropped = [s.id for s in self.scheduler.steps
                           if self.scheduler.state(s.id) is StepState.RUNNING]
                await steps.forget(self, dropped, f"a replan dropped it: {reason}")
                self.scheduler.new_round()
                self.plan_closed, self.round_reason = False, reason
                self.replan, self.decision = None, None
                await self.events.emit(ReplanStarted(run_id=self.run_id, round=round_ + 1,
                                                     reason=reason, source=source))
            await self.save()

    async def _synthesize(self, replans_left: int) -> SynthesisDecision | None:
        """Ask the synthesizer to join; its decision, or None if a replan came first."""
        self.decision = None
        self.synthesis_round, self.synthesis_since = self.scheduler.round, time.time()
        plan = Plan(steps=self.scheduler.steps, round=self.scheduler.round)
        # What an on_failure "continue" left out is told too.
        failures = self.scheduler.failures | dict.fromkeys(
            self.scheduler.blocked(), "not run: a step it needs failed")
        task = SynthesisTask(run_id=self.run_id, goal=self.request.goal, plan=plan,
                             results=self.scheduler.results, failures=failures,
                             replans_left=replans_left,
                             nonce=self.env.nonces.synthesis(self.run_id, plan.round))
        # Saved while the synthesizer starts on it (the save was a millisecond of the run's
        # tail); a planner taking the run over before the save asks again.
        sent = await self.env.bus.publish_soon(
            delegation.synthesis_subject(self), task,
            msg_id=self.env.nonces.msg_id(f"{self.run_id}/synthesis/{plan.round}/f{self.fence}"),
            headers=telemetry.task_headers(self.run_id))
        await self.save()
        await self.env.bus.settle([sent])
        await self._until(lambda: self.decision is not None)
        self.synthesis_since = 0.0
        return self.decision

    async def _until(self, done: Callable[[], bool]) -> None:
        """Wait until ``done()`` holds or a replan request arrives (``notify`` wakes us)."""
        while not done() and self.replan is None:
            await self._changed.wait()
            self._changed = anyio.Event()

    def notify(self) -> None:
        """Something the run may be waiting on changed."""
        self._changed.set()

    # -- what comes back (applied in ``outcomes``) ---------------------------------------

    async def receive(self, messages: Sequence[Message], sender: str, *,
                      patient: bool = False) -> list[Message]:
        """Apply the outcomes the ``sender`` role sent in one message, in order; returns
        once they are stored (so the message may be acknowledged). ``patient``: results
        that came before their claim are not applied but returned, to be offered again."""
        early: list[Message] = []
        try:
            async with self.lock:
                if self.scope.cancel_called:
                    # This planner let the run go (it lost the lease, or the fence) while
                    # the outcome waited: whatever it was doing may be cut short, so
                    # nothing more is applied here. The run's new owner gets the message.
                    raise Fenced(f"run {self.run_id} is no longer driven here")
                if self.record.status != "active" or self.events.closed:
                    log.info("run %s has ended; %s changes nothing", self.run_id,
                             type(messages[0]).__name__ if messages else "nothing")
                    return []
                told = True
                for message in messages:
                    try:
                        told = await outcomes.apply(self, message, sender,
                                                    patient=patient) and told
                    except outcomes.Early:
                        early.append(message)
            if told and not early:  # their events say it all (the state is written now
                await self.saver.save_by_events(len(messages))  # and then)
            else:
                await self.save()
        except StorageFull as exc:  # what it would start cannot be stored: it cannot go on
            self.abort(RunFailure("runtime", str(exc), "storage"))
        return early

    async def refuse(self, message: Message | str, reason: str, *, sender: str,
                     role: str) -> None:
        """Refuse an outcome its planner does not hand to ``receive`` (``outcomes.refuse``;
        a ``str``: the kind of one that could not be read), and store the event that says
        so."""
        async with self.lock:
            await outcomes.refuse(self, message, reason, sender=sender, role=role)
        await self.events.flush()

    async def watch(self) -> None:
        """Check the run's deadlines until it ends (beside ``drive``: ``timers``)."""
        await timers.watch(self)

    # -- what the policies use (``RunOps``; callers hold ``lock``) -----------------------

    def touch(self, step_id: int) -> None:
        """The step's record changed: write it with the next save."""
        self.saver.touched.add(step_id)

    async def send(self, subject: str, message: Message, *, msg_id: str,
                   step_id: int = 0, fresh: bool = False) -> None:
        """Send work now; it is confirmed stored before the state that says so is saved
        (``fresh``: see ``Bus.publish_soon``)."""
        self.saver.unsettled.append((step_id, await self.env.bus.publish_soon(
            subject, message, msg_id=msg_id, headers=telemetry.task_headers(self.run_id),
            fresh=fresh)))

    async def spent(self, source: str, usage: Usage) -> None:
        if not usage.calls:
            return
        event = UsageRecorded(run_id=self.run_id, source=source, usage=usage,
                              total=self.usage + usage)
        if identity(event) in self.events.announced:  # counted by the previous owner
            self.events.announced.discard(identity(event))
            return
        self.usage = event.total
        await self.events.emit(event)

    # -- helpers -------------------------------------------------------------------------

    @property
    def never_saved(self) -> bool:
        """No state of this owner's written yet (``RunSaver.never_saved``)."""
        return self.saver.never_saved

    @property
    def holding(self) -> bool:
        """Steps planned now wait for the round's approval before they run."""
        return self.review_mode != "off" and not self.plan_closed

    def state_of(self, step_id: int) -> StepState | None:
        """The step's state; None for ids not in the current plan (dropped or never seen)."""
        try:
            return self.scheduler.state(step_id)
        except StepStateError:
            return None

    def current(self, step_id: int, attempt: int) -> bool:
        """Is this the outcome we wait for? Stale attempts and dropped steps are not."""
        return self.state_of(step_id) is StepState.RUNNING \
            and self.scheduler.attempt(step_id) == attempt

    def told_outcome(self, step_id: int, attempt: int) -> bool:
        """Does the log already hold this attempt's outcome (announced by a previous owner,
        its message still to come)? Then nothing else may end or restart it."""
        return ("StepFinished", step_id, attempt) in self.told \
            or ("StepFailed", step_id, attempt) in self.told

    def _why_replan(self) -> tuple[str, str]:
        if self.replan is not None:
            return self.replan.reason, self.replan.source
        failures = {sid: error for sid, error in self.scheduler.failures.items()
                    if self.scheduler.step(sid).on_failure != "continue"}
        if failures:
            return "; ".join(f"step {sid} failed (role {self.scheduler.step(sid).role}): {err}"
                             for sid, err in failures.items()), "planner"
        return "", ""

    async def save(self) -> None:
        """Store what changed (``RunSaver.save``); returns once it is stored."""
        await self.saver.save()
