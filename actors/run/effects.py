"""Side effects: every attempt's idempotency key, and steps that must not act twice.

Each task carries its attempt's idempotency key (a keyed digest of run, step and attempt:
any planner computes the same one, nobody else can). A step whose role or tool says
``effects = "once"`` is not run again blindly after an attempt that may have acted
without its outcome coming back (it timed out, its executor went silent, or its task was
never claimed after delivery): the next attempt carries that attempt's key in
``check_keys``, and its executor asks the tool whether it was done before acting, or fails
it with cause ``outcome_unknown`` when the tool cannot tell. With no attempt left, the
step fails ``outcome_unknown`` at once. An attempt whose outcome is known (a result came:
a tool error, a critic's rejection) is retried as any step. A tool step whose tool says
``effects = "none"`` (it only computes its output) carries that: its executor keeps no
record of its finished attempts (``actors.finished``), for it may run again harmlessly.
"""

from __future__ import annotations

from typing import Any

from protocols import Step

from ._api import RunOps

INTERRUPTED = frozenset({"timeout", "heartbeat", "not_claimed", "unclaimed"})
"""Failures after which the attempt may have acted without its outcome coming back."""


def once(run: RunOps, step: Step) -> bool:
    """Whether the step's role, or a tool it may call, says ``effects = "once"``."""
    team = run.env.team
    if step.tool is not None:
        tools: list[str] = [step.tool]
    elif step.tools is not None:
        tools = step.tools
    else:
        role = team.roles.get(step.role)
        tools = role.tools if role is not None else []
    return team.effects_once(step.role, tools)


def key(run: RunOps, step_id: int, attempt: int) -> str:
    """The attempt's idempotency key."""
    return run.env.nonces.idempotency(run.run_id, step_id, attempt)


def task_fields(run: RunOps, step: Step, attempt: int) -> dict[str, Any]:
    """The task's fields about side effects: its key, and for a ``once`` step the keys of
    the interrupted attempts its executor must ask about first."""
    fields: dict[str, Any] = {"idempotency_key": key(run, step.id, attempt)}
    if step.tool is not None and run.env.team.effects_none(step.role, step.tool):
        fields["effects"] = "none"  # nothing to do once: its executor records nothing
    elif once(run, step):
        fields["effects"] = "once"
        fields["check_keys"] = list(run.meta[step.id].check_keys)
    return fields


def after_failure(run: RunOps, step: Step, attempt: int, error: str, retry: bool,
                  cause: str, interrupted: bool) -> tuple[str, bool, str]:
    """What a failed attempt means for the step's side effects: the ``(error, retry,
    cause)`` to announce. An interrupted attempt of a ``once`` step is remembered (its key
    goes to the next attempt), or with no attempt left fails ``outcome_unknown``."""
    meta = run.meta[step.id]
    if not (interrupted or cause in INTERRUPTED) or not once(run, step):
        meta.check_keys = []  # the outcome is known: a result (or a person) told it
        return error, retry, cause
    unknown = key(run, step.id, attempt)
    meta.check_keys = [*meta.check_keys, unknown]
    if retry:
        return (f"{error}; its outcome is unknown (effects = \"once\"): attempt "
                f"{attempt + 1} first asks the tool about idempotency key {unknown}",
                True, cause)
    return (f"outcome unknown: attempt {attempt} of this effects = \"once\" step may have "
            f"acted ({error}); idempotency key {', '.join(meta.check_keys)}; not run "
            "again: a person must check whether it was done", False, "outcome_unknown")
