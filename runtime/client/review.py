"""The client's side of plan review and step gates: find what a run holds for approval (a
plan round, or a high-risk step), decide on it.

A run with ``review_plan = "human"`` announces each plan round with
``event.plan.awaiting_approval`` and runs none of it until a ``plan.decision`` naming that
plan's digest arrives on ``<prefix>.result.<run_id>.client``: approve it as written or
edited, or reject it with a reason. ``plancast plan show/approve/reject`` and the gateway
use these functions.
"""

from __future__ import annotations

import anyio

from protocols import (
    OutcomeRefused,
    PlanApproved,
    PlanAwaitingApproval,
    PlanDecision,
    PlanRejected,
    ReplanStarted,
    RunEvent,
    RunFailed,
    RunFinished,
    Step,
    StepApproved,
    StepAwaitingApproval,
    StepDecision,
    StepFailed,
    Verb,
)

from ..bus import Bus, nuid
from .errors import NothingAwaitsApproval
from .runs import events_so_far, follow


def awaiting_plan(events: list[RunEvent]) -> PlanAwaitingApproval | None:
    """The plan these events leave awaiting approval, if any."""
    current: PlanAwaitingApproval | None = None
    for event in events:
        if isinstance(event, PlanAwaitingApproval):
            current = event
        elif isinstance(event, PlanApproved | PlanRejected | ReplanStarted | RunFinished
                        | RunFailed):
            current = None
    return current


async def plan_awaiting(bus: Bus, run_id: str) -> PlanAwaitingApproval:
    """The plan the run holds for approval now; NothingAwaitsApproval if none."""
    plan = awaiting_plan(await events_so_far(bus, run_id))
    if plan is None:
        raise NothingAwaitsApproval(f"no plan of run {run_id} awaits approval now (see "
                                    f"`plancast watch {run_id}`)")
    return plan


def awaiting_steps(events: list[RunEvent]) -> dict[int, StepAwaitingApproval]:
    """The step attempts these events leave waiting at their approval gate, by step."""
    waiting: dict[int, StepAwaitingApproval] = {}
    for event in events:
        if isinstance(event, StepAwaitingApproval):
            waiting[event.step_id] = event
        elif isinstance(event, StepApproved | StepFailed) and event.step_id in waiting \
                and waiting[event.step_id].attempt == event.attempt:
            del waiting[event.step_id]
        elif isinstance(event, ReplanStarted | RunFinished | RunFailed):
            waiting.clear()
    return waiting


async def decide_step(bus: Bus, run_id: str, step_id: int, *, approved: bool,
                      reason: str = "", by: str = "") -> StepAwaitingApproval:
    """Let a step held at its approval gate run, or fail it; returns what was decided on."""
    step = awaiting_steps(await events_so_far(bus, run_id)).get(step_id)
    if step is None:
        raise NothingAwaitsApproval(f"step {step_id} of run {run_id} does not await approval "
                                    f"now (see `plancast plan show {run_id}`)")
    await bus.publish_durable(
        bus.subject(Verb.RESULT, run_id, "client"),
        StepDecision(run_id=run_id, step_id=step_id, attempt=step.attempt, approved=approved,
                     reason=reason, by=by),
        msg_id=f"{run_id}/gate/{step_id}/{step.attempt}/{nuid()}")
    return step


async def decide_plan(bus: Bus, run_id: str, *, approved: bool, steps: list[Step] | None = None,
                      reason: str = "", by: str = "") -> PlanAwaitingApproval:
    """Approve (optionally with edited ``steps``) or reject the plan the run holds now;
    returns the plan decided on. The run's events say whether the decision counted (an
    invalid edit is refused there, with the reason, and the plan still awaits)."""
    plan = await plan_awaiting(bus, run_id)
    await bus.publish_durable(
        bus.subject(Verb.RESULT, run_id, "client"),
        PlanDecision(run_id=run_id, round=plan.round, digest=plan.digest, approved=approved,
                     steps=steps, reason=reason, by=by),
        msg_id=f"{run_id}/plan/{plan.round}/{plan.digest}/{nuid()}")
    return plan


Answer = PlanApproved | PlanRejected | StepApproved | StepFailed | OutcomeRefused | RunFinished \
    | RunFailed
"""What the run says of a decision: taken (approved, rejected; a rejected step fails),
refused (``event.outcome.refused``, with the reason), or the run ended first."""


async def decision_answer(bus: Bus, run_id: str, *, after: int, step_id: int | None,
                          by: str, wait: float) -> Answer | None:
    """The run's answer to the decision ``by`` made on its plan (``step_id`` None) or on a
    step's gate, among its events numbered above ``after``; None if none came within
    ``wait`` seconds (the decision is stored: the run may still take it)."""
    kind = "plan.decision" if step_id is None else "step.decision"
    with anyio.move_on_after(wait):
        async for event in follow(bus, run_id):
            if event.seq <= after:
                continue
            match event:
                case OutcomeRefused() if event.kind == kind and event.sender == by \
                        and event.step_id == step_id:
                    return event
                case PlanApproved() | PlanRejected() if step_id is None:
                    return event
                case StepApproved() | StepFailed() if event.step_id == step_id:
                    return event
                case RunFinished() | RunFailed():
                    return event
    return None
