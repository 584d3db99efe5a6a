"""The planner's side of hierarchical teams: a run knows its parent and its children.

A step of a ``team`` role is done by a child run whose id is derived from the step and
its attempt (``protocols.child_run_id``), so the run that owns the step can name the child
in its events (``event.step.started``) and cancel it when it gives the attempt up (a
timeout, a replan that drops it, the run's own end) without asking the team lead, which
may be dead (``steps.forget``). A child run says whose step it answers on
``event.run.started``. What is here are questions; their callers act on the answers.
"""

from __future__ import annotations

from protocols import RunStarted, Verb, child_run_id
from runtime.config import RoleConfig, is_team, plan_roles

from .. import prompts
from ._api import RunOps


def run_started(run: RunOps) -> RunStarted:
    """The run's first event; a child run's names the parent step it answers."""
    return RunStarted(run_id=run.run_id, goal=run.request.goal, planner=run.env.owner_id,
                      parent=run.request.parent)


def child_of(run: RunOps, step_id: int, attempt: int | None = None) -> str:
    """The child run of this attempt (None: the current one) of the step, if a sub-team
    does it ("" otherwise, and for a step not in the plan)."""
    if run.state_of(step_id) is None \
            or not is_team(run.env.team, run.scheduler.step(step_id).role):
        return ""
    return child_run_id(run.run_id, step_id, attempt or run.scheduler.attempt(step_id))


def roles(run: RunOps) -> list[RoleConfig]:
    """The roles the run's plans may use: a child run's members only."""
    return plan_roles(run.env.team, run.request, run.env.config)


def planner_system_prompt(run: RunOps) -> str:
    """The planner's system prompt, with a sub-team's brief after it."""
    base = run.env.config.system_prompt or prompts.PLANNER
    brief = run.request.planner_prompt
    if not brief:
        return base
    return f"{base}\n\nYou plan for a sub-team. Its brief:\n{brief}"


def synthesis_subject(run: RunOps) -> str:
    """Where the run's synthesis goes: to its named synthesizer (a sub-team's), or any."""
    if run.request.synthesizer:
        return run.env.bus.subject(Verb.SYNTHESIS_FOR, run.request.synthesizer)
    return run.env.bus.subject(Verb.SYNTHESIS)
