"""Plan review: a round planned in full waits for approval before any of it runs.

With ``review_plan`` on (the team's, or the run's own), the planner streams the round as
usual but holds its steps; it checks the whole plan, announces it
(``event.plan.awaiting_approval``, with a digest naming it) and waits, up to ``[timeouts]
approval`` (``review`` when the critic decides), for a ``plan.decision`` repeating the
digest. Approval dispatches the plan, or an edit of it that was checked exactly like the
model's plan; a rejection sends it back to the model with the reason, as one more plan
attempt. Who decided, and what an edit changed, are events.
"""

from __future__ import annotations

import copy
import hashlib
import time

import anyio
import msgspec

from protocols import (
    PlanApproved,
    PlanAwaitingApproval,
    PlanDecision,
    PlanRejected,
    PlanReviewTask,
    Step,
    StepPlanned,
    Verb,
)
from runtime.client import check_tool_allowed
from runtime.dag import PlanValidationError, StepState

from ._api import RunOps
from .state import RunFailure, StepMeta, accepted_in_round, shaped
from .steps import dispatch

HELD = (StepState.PENDING, StepState.READY)


def review_mode(team_mode: str, request_mode: str | None) -> str:
    """Who reviews a run's plans: the team's reviewer when its file names one, else the one
    the run asked for ("off" if none). A request can add review, never drop or change it."""
    return team_mode if team_mode != "off" else request_mode or "off"


def review_problem(team_mode: str, request_mode: str | None) -> str:
    """Why a request's ``review_plan`` cannot be granted ("" if it can). Only a team
    without review lets a run choose: "human" lets any client (the submitter too) approve
    instead of the critic checking the team's ``plan_policy``, and "auto" replaces the
    person the team asked for by a model, so neither is stricter than the other."""
    if request_mode is None or review_mode(team_mode, request_mode) == request_mode:
        return ""
    return (f"the run asks for review_plan = {request_mode!r}, but this team reviews every "
            f"plan (review_plan = {team_mode!r} in its team file) and a run cannot change "
            f"that: leave review_plan out of the request (or set it to {team_mode!r})")


def digest(steps: list[Step]) -> str:
    """A short name for exactly these steps: a decision approves what its sender saw."""
    return hashlib.sha256(msgspec.json.encode(steps)).hexdigest()[:16]


def held_steps(run: RunOps) -> list[Step]:
    """The current round's steps that have not started."""
    return [s for s in accepted_in_round(run.scheduler, run.meta)
            if run.scheduler.state(s.id) in HELD]


async def resume_round(run: RunOps, round_: int) -> bool:
    """Where a planner that took a reviewed run over finds its round (the caller holds no
    lock). True if the round's plan was approved before (some of it was dispatched): it is
    dispatched and closed here. Steps still held are discarded, so the round is planned and
    reviewed again: the decision its predecessor waited for would be refused as stale."""
    async with run.lock:
        planned = accepted_in_round(run.scheduler, run.meta)
        if not planned:
            return False
        if any(run.scheduler.state(s.id) not in HELD for s in planned):
            await dispatch(run, run.scheduler.ready())
            return True
        for sid in run.scheduler.discard_pending():
            del run.meta[sid]
        await run.events.emit(PlanRejected(
            run_id=run.run_id, round=round_, retrying=True,
            error="the planner that held this plan for approval stopped before a decision; "
                  "the plan is written again and awaits approval anew"))
    await run.save()
    return False


def check_complete(run: RunOps) -> None:
    """The held plan as ``close_plan`` will judge it, before anyone is asked to approve it."""
    copy.deepcopy(run.scheduler).close_plan()


async def await_approval(run: RunOps, round_: int) -> None:
    """Hold the round until it is decided on: an approved plan (or its edit) is dispatched
    here; a rejection raises PlanValidationError; no decision in time fails the run."""
    mode = run.review_mode
    wait = run.env.team.timeouts.approval if mode == "human" else run.env.team.timeouts.review
    steps = held_steps(run)
    plan_digest = digest(steps)
    async with run.lock:
        run.awaiting, run.plan_decision = (round_, plan_digest), None
        run.decided = anyio.Event()
        await run.events.emit(PlanAwaitingApproval(
            run_id=run.run_id, round=round_, digest=plan_digest, steps=steps,
            reviewer="human" if mode == "human" else "auto", deadline=time.time() + wait))
    await run.save()
    if mode == "auto":
        await run.env.bus.publish_durable(
            run.env.bus.subject(Verb.REVIEW),
            PlanReviewTask(run_id=run.run_id, goal=run.request.goal, round=round_,
                           digest=plan_digest, steps=steps, done=run.scheduler.results,
                           policy=run.env.team.plan_policy,
                           nonce=run.env.nonces.plan(run.run_id, round_, plan_digest)),
            msg_id=run.env.nonces.msg_id(f"{run.run_id}/plan/{round_}/{plan_digest}/f{run.fence}"))
    with anyio.move_on_after(wait):
        await run.decided.wait()
    async with run.lock:
        decision, run.awaiting = run.plan_decision, None  # a repeat of it passes silently
        if decision is None:
            setting = "approval" if mode == "human" else "review"
            raise RunFailure("plan", f"nobody decided on the plan of round {round_} within "
                             f"{wait:g}s ([timeouts] {setting}); decide sooner (`plancast "
                             f"plan approve {run.run_id}`) or raise the timeout", "approval")
        by = decision.by or "a reviewer"
        if not decision.approved:
            raise PlanValidationError(f"the plan was rejected by {by}: "
                                      f"{decision.reason or 'no reason given'}")
        edited = decision.steps is not None and decision.steps != steps
        await run.events.emit(PlanApproved(
            run_id=run.run_id, round=round_, by=by, edited=edited,
            changes=changes(steps, decision.steps or steps) if edited else ""))
        if edited and decision.steps is not None:
            for sid in run.scheduler.discard_pending():
                del run.meta[sid]
            for step in decision.steps:
                await accept_held(run, round_, step)
        await dispatch(run, run.scheduler.ready())
    await run.save()


def check_edit(run: RunOps, steps: list[Step]) -> None:
    """Raise PlanValidationError unless ``steps`` could replace the held round: checked on
    a copy of the run's DAG, exactly as the model's steps are."""
    trial = copy.deepcopy(run.scheduler)
    trial.discard_pending()
    for step in steps:
        check_tool_allowed(run.env.team, step, run.env.known_tools)
        trial.add(step)
    trial.close_plan()


async def accept_held(run: RunOps, round_: int, step: Step) -> None:
    """Add a step to the held round (the caller holds the lock); it runs once approved."""
    check_tool_allowed(run.env.team, step, run.env.known_tools)
    run.scheduler.add(step)
    run.meta[step.id] = StepMeta(round_, planned_seq=run.events.next_seq)
    run.touch(step.id)
    await run.events.emit(StepPlanned(run_id=run.run_id, round=round_, step=shaped(step)))


def decision_problem(run: RunOps, decision: PlanDecision) -> str:
    """Why this decision cannot count now, or "" if it can."""
    if run.awaiting is None:
        return "no plan of this run awaits approval"
    round_, plan_digest = run.awaiting
    if (decision.round, decision.digest) != (round_, plan_digest):
        return (f"it decides on plan {decision.digest!r} of round {decision.round}, but the "
                f"plan awaiting approval is {plan_digest!r} of round {round_} (see "
                f"`plancast plan show {run.run_id}`)")
    if decision.approved and decision.steps is not None:
        try:
            check_edit(run, decision.steps)
        except PlanValidationError as exc:
            return f"the edited plan is invalid: {exc}"
    return ""


def changes(before: list[Step], after: list[Step]) -> str:
    """What an edit changed, one clause per step: ``step 2: args; step 4 added``."""
    old, new = {s.id: s for s in before}, {s.id: s for s in after}
    said = []
    for sid in sorted(old.keys() | new.keys()):
        if sid not in new:
            said.append(f"step {sid} removed")
        elif sid not in old:
            said.append(f"step {sid} added")
        elif old[sid] != new[sid]:
            fields = [f for f in old[sid].__struct_fields__
                      if getattr(old[sid], f) != getattr(new[sid], f)]
            said.append(f"step {sid}: {', '.join(fields)}")
    return "; ".join(said)
