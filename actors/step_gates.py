"""Approval gates: a high-risk step waits for a person before each attempt runs.

A step is gated when its role has ``approval = true``, or it calls (or, as an agent step,
may call) a tool in the team's ``approve_tools``. Its dispatch is held: the step stays
ready, announced with ``event.step.awaiting_approval``, until a ``step.decision`` for that
attempt approves it (it is dispatched) or rejects it (it fails, cause ``declined``), or
``[timeouts] approval`` passes (it fails, cause ``approval``). The gate is independent of
plan review. A planner that takes the run over announces a gate still closed again.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from protocols import Step, StepApproved, StepAwaitingApproval, StepDecision
from runtime.config import TeamConfig

if TYPE_CHECKING:
    from .run import Run


def why_gated(team: TeamConfig, step: Step) -> str:
    """Why the step needs a person's approval before it runs, or "" if it does not."""
    role = team.roles.get(step.role)
    if role is not None and role.approval:
        return f"every step of role {step.role!r} needs approval (approval = true)"
    gated = set(team.approve_tools)
    if step.tool is not None:
        tools = {step.tool}
    else:
        allowed = set(role.tools if role is not None else ())
        tools = allowed & set(step.tools) if step.tools is not None else allowed
    risky = sorted(tools & gated)
    if not risky:
        return ""
    return f"it {'calls' if step.tool else 'may call'} {', '.join(risky)} (approve_tools)"


async def hold(run: Run, step: Step, attempt: int) -> bool:
    """True if this attempt must wait at its gate (the caller holds the lock, and does not
    dispatch it); the first time, the gate is announced."""
    if (step.id, attempt) in run.passed:
        return False
    why = why_gated(run.team, step)
    if not why:
        return False
    if run.gates.get(step.id, (0, 0.0))[0] != attempt:
        deadline = time.time() + run.team.timeouts.approval
        run.gates[step.id] = (attempt, deadline)
        await run.events.emit(StepAwaitingApproval(
            run_id=run.run_id, step_id=step.id, attempt=attempt, role=step.role, reason=why,
            deadline=deadline))
    return True


def problem(run: Run, decision: StepDecision) -> str:
    """Why this decision cannot count, or "" if it can."""
    waiting = run.gates.get(decision.step_id)
    if waiting is None or waiting[0] != decision.attempt:
        return (f"attempt {decision.attempt} of step {decision.step_id} does not await "
                "approval")
    return ""


async def decide(run: Run, decision: StepDecision) -> None:
    """Open the gate (the step is dispatched) or fail the attempt; the caller holds the
    lock and checked ``problem``."""
    sid, attempt, by = decision.step_id, decision.attempt, decision.by or "a reviewer"
    del run.gates[sid]
    step = run.scheduler.step(sid)
    if decision.approved:
        run.passed.add((sid, attempt))
        await run.events.emit(StepApproved(run_id=run.run_id, step_id=sid, attempt=attempt,
                                           by=by))
        await run.dispatch([step])
    else:
        await run.step_failed(step, attempt, f"rejected by {by}: "
                              f"{decision.reason or 'no reason given'}", False, "declined")


async def expire(run: Run, now: float) -> bool:
    """Fail the attempts whose gate stayed closed past ``[timeouts] approval`` (the caller
    holds the lock); True if any did."""
    late = [(sid, attempt) for sid, (attempt, deadline) in run.gates.items() if now > deadline]
    for sid, attempt in late:
        del run.gates[sid]
        await run.step_failed(
            run.scheduler.step(sid), attempt, f"nobody approved attempt {attempt} of step "
            f"{sid} within {run.team.timeouts.approval:g}s ([timeouts] approval); approve it "
            f"sooner (`plancast plan approve {run.run_id} --step {sid}`) or raise the timeout",
            False, "approval")
    return bool(late)
