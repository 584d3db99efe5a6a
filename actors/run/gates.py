"""Approval gates: a high-risk step waits for a person before each attempt runs.

A step is gated when its role has ``approval = true``, or it calls (or, as an agent step,
may call) a tool in the team's ``approve_tools``. Its dispatch is held: the step stays
ready, announced with ``event.step.awaiting_approval``, until a ``step.decision`` for that
attempt approves it (it is dispatched) or rejects it (it fails, cause ``declined``), or
``[timeouts] approval`` passes (it fails, cause ``approval``). The gate is independent of
plan review. A planner that takes the run over announces a gate still closed again.

These are the questions; holding a step (``steps``), deciding (``outcomes``) and
expiring a gate (``timers``) are their callers'.
"""

from __future__ import annotations

from protocols import Step, StepDecision
from runtime.config import TeamConfig

from ._api import RunOps


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


def why_held(run: RunOps, step: Step, attempt: int) -> str:
    """Why this attempt must wait at its gate, or "" if it may run (a person approved it,
    or its step is not gated). Holding it, and announcing that, is ``steps.dispatch``'s."""
    if (step.id, attempt) in run.passed:
        return ""
    return why_gated(run.env.team, step)


def problem(run: RunOps, decision: StepDecision) -> str:
    """Why this decision cannot count, or "" if it can."""
    waiting = run.gates.get(decision.step_id)
    if waiting is None or waiting[0] != decision.attempt:
        return (f"attempt {decision.attempt} of step {decision.step_id} does not await "
                "approval")
    return ""
