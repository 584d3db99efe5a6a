"""What comes back to a run, applied under its lock: claims, results, verdicts, decisions,
replan requests and failure reports.

An outcome either changes the run, or is refused with an ``outcome.refused`` event that
says why (a stale attempt, a sender that never claimed it, a round already over). Only a
repeat of something already applied passes without a word: a message delivered again
because its acknowledgement was lost, or one a previous owner had already announced.
"""

from __future__ import annotations

import contextlib
import logging
import time

import msgspec

from protocols import (
    ActorError,
    CriticVerdict,
    Message,
    OutcomeRefused,
    PlanDecision,
    ReplanRequest,
    ReviewTask,
    RunCancel,
    Step,
    StepApproved,
    StepClaimed,
    StepDecision,
    StepResult,
    StepReviewing,
    StepStarted,
    SynthesisDecision,
    Verb,
    Verdict,
    WorkError,
    WorkFailed,
    object_space,
)
from runtime.bus import CLIENT, TRANSIENT, APIError, ObjectRefused
from runtime.config import TEAM_KIND
from runtime.dag import StepState, StepStateError
from runtime.errors import PlancastError
from runtime.nonces import Nonces

from . import delegation, gates
from ._api import RunOps
from .review import decision_problem
from .state import PREVIEW, RunFailure, step_source
from .steps import dispatch, forget, step_done, step_failed

log = logging.getLogger(__name__)


class Early(PlancastError):
    """A result arrived before its sender's claim (a claim can be stored late when its
    stream fails over): offer it again shortly rather than refuse it now."""


async def apply(run: RunOps, message: Message, sender: str, *, patient: bool = False) -> bool:
    """Apply ``message``, sent on the ``sender`` role's subject, to the run; ``patient``:
    raise ``Early`` for a result whose claim may still be on its way.

    True if the events it emitted tell all it changed: a planner taking the run over
    re-derives that from them (``resume.fold``), so it may be acknowledged once they are
    stored, before the run's state is written again."""
    named = getattr(message, "run_id", run.run_id)
    wrong = f"it names run {named!r}: an outcome travels on its own run's subject" \
        if named != run.run_id else wrong_sender(run, message, sender) or unproven(run, message)
    if wrong:
        who = getattr(message, "executor", "") or getattr(message, "actor", "") or sender
        await refuse(run, message, wrong, step_id=getattr(message, "step_id", None),
                     attempt=getattr(message, "attempt", 0), sender=who, role=sender)
        return False
    match message:
        case StepClaimed():
            await _claim(run, message)
            return True
        case StepResult():
            return await _result(run, message, patient, sender)
        case Verdict():
            await _verdict(run, message, sender)
        case SynthesisDecision():
            await _decision(run, message, sender)
        case ReplanRequest():
            await _replan_request(run, message)
        case PlanDecision():
            await _plan_decision(run, message, sender)
        case StepDecision():
            problem = gates.problem(run, message)
            if problem:
                await refuse(run, message, problem, step_id=message.step_id,
                             attempt=message.attempt, sender=message.by, role=sender)
            else:
                await _step_decision(run, message)
        case RunCancel():
            who = f" by {message.source}" if message.source else ""
            why = f": {message.reason}" if message.reason else ""
            run.abort(RunFailure("runtime", f"cancelled{who}{why}", "cancelled"))
        case WorkError():
            await run.spent(_spender(message), message.usage)
            await run.events.emit(WorkFailed(
                run_id=run.run_id, work=message.work, step_id=message.step_id,
                attempt=message.attempt, actor=message.actor, error=message.error,
                will_retry=message.will_retry))
            if message.setup_error:  # every retry, every replan would fail the same way
                run.abort(RunFailure("synthesize" if message.work == "synthesis" else "execute",
                                     f"{message.work} by {message.actor}: {message.error}",
                                     "config"))
            elif not message.will_retry and message.work in WORK_KINDS:
                await _replan_request(run, ReplanRequest(  # given up: nothing else will come
                    run_id=run.run_id, source=message.actor, work=message.work,
                    failed_step=message.step_id, attempt=message.attempt,
                    reason=message.error))
                return False
            return True  # a report: it changes no state (an abort saves on its own)
    return False


REFUSALS_TOLD = 1000
"""Refused outcomes of one run (in one planner's hands) each told with an event; the
sender still hears of every one on its error subject, and the log keeps them all."""

WORK_KINDS = {"review": "critic", "synthesis": "synthesizer"}
"""The role kind that does each kind of work other than steps."""


def wrong_sender(run: RunOps, message: Message, sender: str) -> str | None:
    """Why the ``sender`` role may not send this message, if it may not: each role's NATS
    user publishes only on its own result subject, so a message on the wrong one is forged
    or misrouted."""
    team = run.env.team
    match message:
        case StepClaimed() | StepResult():
            allowed = _role_of(run, message.step_id, sender)
            if message.executor.partition("/")[0] != sender:
                return f"sent on {sender!r}'s subject by executor {message.executor!r}"
        case Verdict():
            allowed = team.senders("critic")
        case SynthesisDecision():  # a sub-team's run may name its own synthesizer
            allowed = [run.request.synthesizer] if run.request.synthesizer \
                else team.senders("synthesizer")
        case ReplanRequest() if message.work or message.failed_step is not None:
            allowed = team.senders("supervisor")
        case ReplanRequest():  # a new round: the run's owner asks, or its supervisor
            allowed = [CLIENT, *team.senders("supervisor")]
        case RunCancel():  # a child run's parent (its planner, its team lead) may, too
            allowed = [CLIENT, *team.kind_roles("supervisor"),
                       *(team.kind_roles("planner") + team.kind_roles(TEAM_KIND)
                         if run.request.parent is not None else [])]
        case PlanDecision():  # a person decides as the client; with "auto", the critic
            allowed = [CLIENT] if run.review_mode == "human" else team.senders("critic")
        case StepDecision():
            allowed = [CLIENT]
        case WorkError() if message.work in WORK_KINDS:
            allowed = team.senders(WORK_KINDS[message.work])
        case WorkError() if message.step_id is not None:
            allowed = _role_of(run, message.step_id, sender)
        case WorkError():
            return "it names no step: a report names the work its sender holds"
        case _:
            return None
    if sender in allowed:
        return None
    return f"only {' or '.join(repr(a) for a in allowed)} may send it; it came from {sender!r}"


def unproven(run: RunOps, message: Message) -> str | None:
    """Why ``message`` does not show that its sender received the work it answers, if it
    does not: an answer repeats its task's ``nonce``, which only the planners can compute
    and only the task's receivers read (``runtime.nonces``)."""
    n, rid = run.env.nonces, run.run_id
    match message:
        case StepClaimed() | StepResult():
            expected = n.task(rid, message.step_id, message.attempt)
        case Verdict():
            expected = n.review(rid, message.step_id, message.attempt)
        case SynthesisDecision():
            expected = n.synthesis(rid, message.round)
        case PlanDecision() if run.review_mode != "human":
            expected = n.plan(rid, message.round, message.digest)
        case WorkError() | ReplanRequest() if message.work == "synthesis":
            expected = n.synthesis(rid, run.scheduler.round)
        case WorkError() | ReplanRequest() if message.work or message.failed_step is not None:
            sid = message.step_id if isinstance(message, WorkError) else message.failed_step
            if sid is None:
                return "it names no step: a report names the work its sender holds"
            expected = (n.review if message.work == "review" else n.task)(
                rid, sid, message.attempt)
        case _:
            return None
    if not message.nonce:
        return ("it carries no `nonce`: an answer repeats the nonce of the task it answers "
                "(docs/wire.md; upgrade the worker)")
    if not Nonces.same(message.nonce, expected):
        return ("its `nonce` is not that of the work it names: only the receiver of a task "
                "may answer it (work never received, or of another attempt or round)")
    return None


def _role_of(run: RunOps, step_id: int, sender: str) -> list[str]:
    """The role of the step (a step not in the plan is refused later, for that reason)."""
    try:
        return [run.scheduler.step(step_id).role]
    except StepStateError:
        return [sender]


async def refuse(run: RunOps, message: Message | str, reason: str, *, role: str,
                 step_id: int | None = None, attempt: int = 0, sender: str = "") -> None:
    """Say that ``message`` (or a message of that kind that could not be read), sent on
    ``role``'s result subject, does not count, and why: on the run's events, and to the
    sender on its role's error subject."""
    kind = message if isinstance(message, str) \
        else msgspec.inspect.type_info(type(message)).tag  # type: ignore[attr-defined]
    log.info("run %s: %s refused: %s", run.run_id, kind, reason)
    run.refused += 1
    if run.refused <= REFUSALS_TOLD:  # a flood of them must not crowd the events stream
        await run.events.emit(OutcomeRefused(run_id=run.run_id, kind=str(kind),
                                             step_id=step_id, attempt=attempt, sender=sender,
                                             reason=reason))
    with contextlib.suppress(Exception):  # a courtesy: the run's events are the record
        await run.env.bus.publish(run.env.bus.subject(Verb.ERROR, role), ActorError(
            role=run.env.name, instance=run.env.instance,
            reason=f"{kind} refused: {reason}", ts=time.time(),
            subject=run.env.bus.subject(Verb.RESULT, run.run_id, role)))


async def _claim(run: RunOps, claim: StepClaimed) -> None:
    """Every claim of the current attempt is recorded: a result counts only from one."""
    meta = run.meta.get(claim.step_id)
    if meta is None or not run.current(claim.step_id, claim.attempt) \
            or meta.review_output is not None or run.told_outcome(claim.step_id, claim.attempt):
        log.info("run %s: claim of step %d attempt %d by %s is for work no longer wanted",
                 run.run_id, claim.step_id, claim.attempt, claim.executor)
        return
    key = f"{claim.executor}#{claim.delivery}"
    if key in meta.claimants:
        return  # delivered again
    meta.claimants.add(key)
    meta.executor, meta.delivery, meta.claimed_at = claim.executor, claim.delivery, time.time()
    meta.beats = claim.heartbeat
    run.touch(claim.step_id)
    await run.events.emit(StepStarted(run_id=run.run_id, step_id=claim.step_id,
                                      attempt=claim.attempt, executor=claim.executor,
                                      delivery=claim.delivery, heartbeat=claim.heartbeat,
                                      child_run=delegation.child_of(run, claim.step_id,
                                                                    claim.attempt)))


async def _result(run: RunOps, result: StepResult, patient: bool, role: str) -> bool:
    """Apply a step's result; True for a success whose ``step.finished`` event holds the
    whole output (all a takeover needs to complete the step: ``resume.fold``)."""
    sid, attempt, sender = result.step_id, result.attempt, result.executor
    meta = run.meta.get(sid)
    if meta is None or run.state_of(sid) is None:
        if ("StepFinished", sid, attempt) not in run.told:
            await refuse(run, result, f"step {sid} is not in the current plan (a replan "
                         "dropped it, or it never existed)", step_id=sid, attempt=attempt,
                         sender=sender, role=role)
        return False
    if not run.current(sid, attempt) or meta.review_output is not None:
        same = meta.executor == sender and meta.delivery == result.delivery \
            and run.scheduler.attempt(sid) == attempt
        repeat = same and meta.answer in (0, _fingerprint(result))
        if not repeat and not _told(run, sid, attempt):
            state = run.state_of(sid)
            why = (f"attempt {attempt} of step {sid} is no longer wanted (the step is at "
                   f"attempt {run.scheduler.attempt(sid)}, {state.value if state else '?'})")
            if same:
                why = (f"a second answer to attempt {attempt} of step {sid} (delivery "
                       f"{result.delivery}): its first answer counted already; one answer "
                       "per delivery")
            elif meta.review_output is not None and run.current(sid, attempt):
                why = f"another result of attempt {attempt} of step {sid} is under review"
            await refuse(run, result, why, step_id=sid, attempt=attempt, sender=sender,
                         role=role)
        return False
    if result.claims:  # the step ended before its claim was due: the result claims it
        await _claim(run, StepClaimed(
            run_id=run.run_id, step_id=sid, attempt=attempt, executor=sender,
            delivery=result.delivery, heartbeat=result.heartbeat))
    if not _claimed_by(meta.claimants, sender, result.delivery):
        if patient:
            raise Early(f"step {sid} attempt {attempt}")
        # Refused alone: the attempt goes on, and its claimant's result still counts; with
        # no claimant, a claim must follow within the claim deadline (``timers``).
        if not meta.claimants and not meta.unclaimed_at:
            meta.unclaimed_at = time.time()
        await refuse(run, result, f"{sender or 'an unnamed sender'} never claimed attempt "
                     f"{attempt} of step {sid} in delivery {result.delivery} (claimed by: "
                     f"{', '.join(sorted(meta.claimants)) or 'nobody yet'})",
                     step_id=sid, attempt=attempt, sender=sender, role=role)
        return False
    meta.executor, meta.delivery = sender, result.delivery  # who settled the attempt
    meta.answer = _fingerprint(result)
    await run.spent(step_source(sid), result.usage)
    meta.usage = meta.usage + result.usage
    run.touch(sid)
    step = run.scheduler.step(sid)
    if not result.ok:
        retry = result.retryable and attempt < run.env.team.step_attempts
        await step_failed(run, step, attempt, result.error, retry,
                          "outcome_unknown" if result.cause == "outcome_unknown" else "error",
                          interrupted=result.cause == "timeout")
        return False
    output = result.output or ""
    if result.output_ref is not None and result.output is None:
        try:  # the sender may only have written it in its own results' space
            output = (await run.env.bus.get_object(result.output_ref, space=object_space(
                run.env.bus.prefix, run.env.bus.subject(Verb.RESULT, run.run_id, role)),
                limit=run.env.object_limit_of(role))).decode()
        except TRANSIENT:
            raise  # a failover: the handler is retried
        except (ObjectRefused, UnicodeDecodeError, APIError) as exc:  # again changes nothing
            ref = result.output_ref
            why = f"its output_ref {ref.bucket}/{ref.name} cannot be used: {exc}"
            await refuse(run, result, why, step_id=sid, attempt=attempt, sender=sender,
                         role=role)
            await step_failed(run, step, attempt, why, attempt < run.env.team.step_attempts,
                              "error")
            return False
    if _reviewed(run, step):
        meta.review_output, meta.review_sent_at = output, time.time()
        review = ReviewTask(run_id=run.run_id, goal=run.request.goal, step=step,
                            attempt=attempt, output=output,
                            inputs=run.scheduler.inputs_for(step),
                            nonce=run.env.nonces.review(run.run_id, sid, attempt))
        await run.events.emit(StepReviewing(run_id=run.run_id, step_id=sid, attempt=attempt,
                                            executor=sender))
        await run.send(run.env.bus.subject(Verb.REVIEW), review, msg_id=run.env.nonces.msg_id(
            f"{run.run_id}/{sid}/{attempt}/f{run.fence}/review"))
        return False
    await step_done(run, step, attempt, output, sender, result.finished_at - result.started_at)
    return len(output) <= PREVIEW


async def _verdict(run: RunOps, verdict: Verdict, role: str) -> None:
    sid, attempt = verdict.step_id, verdict.attempt
    meta = run.meta.get(sid)
    if meta is None or meta.review_output is None or not run.current(sid, attempt):
        decided = run.state_of(sid) in (StepState.DONE, StepState.FAILED) \
            and run.scheduler.attempt(sid) == attempt
        if not decided and ("CriticVerdict", sid, attempt) not in run.told:
            await refuse(run, verdict, f"no output of attempt {attempt} of step {sid} is "
                         "waiting for a verdict", step_id=sid, attempt=attempt, role=role)
        return
    await run.spent(f"critic:{sid}", verdict.usage)
    meta.usage = meta.usage + verdict.usage
    run.touch(sid)
    await run.events.emit(CriticVerdict(
        run_id=run.run_id, step_id=sid, attempt=attempt, approved=verdict.approved,
        critique=verdict.critique))
    step = run.scheduler.step(sid)
    output, meta.review_output = meta.review_output, None
    if verdict.approved:
        await step_done(run, step, attempt, output, meta.executor, 0.0)
        return
    meta.feedback = verdict.critique
    await step_failed(run, step, attempt, f"rejected by the critic: {verdict.critique}",
                      attempt < run.env.team.review_attempts, "rejected")


async def _decision(run: RunOps, decision: SynthesisDecision, role: str) -> None:
    waiting = run.synthesis_since and decision.round == run.scheduler.round \
        and run.decision is None
    if not waiting:
        if ("decision", decision.round) not in run.told and run.decision != decision:
            await refuse(run, decision, f"no synthesis of round {decision.round} is awaited "
                         f"(the run is in round {run.scheduler.round})", role=role)
        return
    await run.spent("synthesizer", decision.usage)
    run.decision = decision
    run.notify()


async def _plan_decision(run: RunOps, decision: PlanDecision, sender: str) -> None:
    """A decision on the plan awaiting approval wakes the round; any other is refused."""
    if decision == run.plan_decision:
        return  # delivered again
    problem = decision_problem(run, decision)
    if problem:
        await refuse(run, decision, problem, sender=decision.by, role=sender)
        return
    run.plan_decision = decision
    run.decided.set()
    await run.spent("critic:plan", decision.usage)


async def _replan_request(run: RunOps, request: ReplanRequest) -> None:
    """Work that could not be done fails for good (and may lead to a replan); a synthesis
    that could not be done ends the run; anything else asks for a new round now."""
    if request.work == "synthesis":
        if run.synthesis_since:
            run.abort(RunFailure("synthesize", f"the synthesis could not be done: "
                                 f"{request.reason}", "synthesis"))
        return
    sid = request.failed_step
    if sid is None:
        run.replan = request
        run.notify()
        return
    attempt = request.attempt or (run.scheduler.attempt(sid) if run.state_of(sid) else 0)
    if run.current(sid, attempt):
        reason = f"{request.source}: {request.reason}"
        await forget(run, [sid], reason)
        await step_failed(run, run.scheduler.step(sid), attempt, reason, False, "dead_letter")


def _spender(report: WorkError) -> str:
    """Whose usage a failed attempt's model calls are, as ``UsageRecorded`` names it."""
    if report.work == "synthesis":
        return "synthesizer"
    if report.step_id is None:
        return report.work
    return f"critic:{report.step_id}" if report.work == "review" \
        else step_source(report.step_id)


def _claimed_by(claimants: set[str], executor: str, delivery: int) -> bool:
    """A result counts only after a claim by the same executor for the same delivery."""
    return f"{executor}#{delivery}" in claimants


def _fingerprint(result: StepResult) -> int:
    """Tells a result delivered again (the same message) from a second answer."""
    return hash(msgspec.json.encode(result)) or 1


def _told(run: RunOps, sid: int, attempt: int) -> bool:
    """Did a previous owner already announce this attempt's outcome (or verdict)?"""
    return run.told_outcome(sid, attempt) or ("CriticVerdict", sid, attempt) in run.told


def _reviewed(run: RunOps, step: Step) -> bool:
    """Does the step's output go to the critic? Asked for, or criteria to check."""
    return step.review or bool(step.success_criteria and run.env.team.kind_roles("critic"))


async def _step_decision(run: RunOps, decision: StepDecision) -> None:
    """Open the gate (the step is dispatched) or fail the attempt; ``gates.problem`` found
    nothing against the decision."""
    sid, attempt, by = decision.step_id, decision.attempt, decision.by or "a reviewer"
    del run.gates[sid]
    step = run.scheduler.step(sid)
    if decision.approved:
        run.passed.add((sid, attempt))
        await run.events.emit(StepApproved(run_id=run.run_id, step_id=sid, attempt=attempt,
                                           by=by))
        await dispatch(run, [step])
    else:
        await step_failed(run, step, attempt, f"rejected by {by}: "
                                f"{decision.reason or 'no reason given'}", False, "declined")
