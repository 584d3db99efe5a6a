"""The planner's side of hierarchical teams: a run knows its parent and its children.

A step of a ``team`` role is done by a child run whose id is derived from the step and
its attempt (``protocols.child_run_id``), so the run that owns the step can name the child
in its events (``event.step.started``) and cancel it when it gives the attempt up (a
timeout, a replan that drops it, the run's own end) without asking the team lead, which
may be dead. A child run says whose step it answers on ``event.run.started``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from protocols import RunCancel, RunStarted, Verb, cancel_id, child_run_id
from runtime.config import RoleConfig, is_team, plan_roles

from . import prompts

if TYPE_CHECKING:
    from .run import Run

log = logging.getLogger(__name__)


def run_started(run: Run) -> RunStarted:
    """The run's first event; a child run's names the parent step it answers."""
    return RunStarted(run_id=run.run_id, goal=run.request.goal, planner=run.planner.owner_id,
                      parent=run.request.parent)


def child_of(run: Run, step_id: int, attempt: int | None = None) -> str:
    """The child run of this attempt (None: the current one) of the step, if a sub-team
    does it ("" otherwise, and for a step not in the plan)."""
    if run.state_of(step_id) is None or not is_team(run.team, run.scheduler.step(step_id).role):
        return ""
    return child_run_id(run.run_id, step_id, attempt or run.scheduler.attempt(step_id))


def roles(run: Run) -> list[RoleConfig]:
    """The roles the run's plans may use: a child run's members only."""
    return plan_roles(run.team, run.request, run.planner.config)


def planner_system_prompt(run: Run) -> str:
    """The planner's system prompt, with a sub-team's brief after it."""
    base = run.planner.config.system_prompt or prompts.PLANNER
    brief = run.request.planner_prompt
    if not brief:
        return base
    return f"{base}\n\nYou plan for a sub-team. Its brief:\n{brief}"


def synthesis_subject(run: Run) -> str:
    """Where the run's synthesis goes: to its named synthesizer (a sub-team's), or any."""
    if run.request.synthesizer:
        return run.bus.subject(Verb.SYNTHESIS_FOR, run.request.synthesizer)
    return run.bus.subject(Verb.SYNTHESIS)


async def cancel_children(run: Run, step_ids: list[int], reason: str) -> None:
    """Cancel the child runs of the running attempts the run is giving up. A child that has
    ended already is not changed; one that cannot be told ends by its own deadline (the
    step's timeout), so a failure here is logged, never raised."""
    for sid in step_ids:
        child = child_of(run, sid)
        if not child:
            continue
        cancel = RunCancel(run_id=child, reason=reason, source=f"run {run.run_id}")
        try:
            await run.bus.publish_durable(
                run.bus.subject(Verb.RESULT, child, run.planner.name), cancel,
                msg_id=cancel_id(child))
        except Exception as exc:
            log.warning("run %s: could not cancel child run %s (%s); it ends by its own "
                        "deadline", run.run_id, child, exc)
