"""What the gateway's routes read and answer, as msgspec types: the routes decode bodies
with them and the OpenAPI document takes its schemas from them, so both say the same."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from protocols import ParentStep, RunId, Step, Usage

from ..client import ChildRun

Reason = Annotated[str, msgspec.Meta(max_length=20_000)]


class Body(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A request body: a field it does not know is refused (a typo is not ignored)."""


class SavedPlanRun(Body, frozen=True, kw_only=True):
    """``POST /runs`` with a plan stored in the deployment: its steps run as the first
    plan (no planner model call), each ``{{name}}`` in it filled from ``params``, as
    ``plancast run --plan NAME -p name=value`` does."""

    saved_plan: str
    """The plan's name (``GET /plans``)."""
    params: dict[str, str] = {}
    """A value for each of the plan's parameters, and for no other name."""
    goal: Annotated[str, msgspec.Meta(max_length=20_000)] = ""
    """The run's goal; empty: the plan's own."""
    review_plan: Literal["off", "human", "auto"] | None = None
    """Hold each plan round for approval; None: the team's ``review_plan``."""
    max_replans: Annotated[int, msgspec.Meta(ge=0, le=10)] = 1
    """Replan rounds allowed (a replan asks the model as usual)."""
    timeout: Annotated[float, msgspec.Meta(gt=0, le=30 * 86_400)] | None = None
    """Seconds the run may take; None: the team's ``[timeouts] run``."""
    run_id: RunId | None = None
    """Chosen by the client to make the submit idempotent."""


class PlanDecisionBody(Body, frozen=True, kw_only=True):
    """``POST /runs/{id}/plan``: the decision on the plan the run holds for approval."""

    approved: bool
    """True runs it (``steps`` if given); False sends it back to the planner's model."""
    steps: list[Step] | None = None
    """An edited plan, checked like the model's."""
    reason: Reason = ""
    """Why it is rejected (the planner's model reads it)."""
    by: str = ""
    """Leave it out: a decision is recorded as made by the user whose token sent it (a
    ``by`` naming anyone else is refused, 403)."""


class StepDecisionBody(Body, frozen=True, kw_only=True):
    """``POST /runs/{id}/steps/{step_id}/decision``: let a step held at its approval gate
    run, or fail it."""

    approved: bool
    """True dispatches the held attempt; False fails it (cause ``declined``)."""
    reason: Reason = ""
    """Why it is rejected."""
    by: str = ""
    """Leave it out (as for a plan decision)."""


class CancelBody(Body, frozen=True, kw_only=True):
    """``POST /runs/{id}/cancel``."""

    reason: Reason = ""
    """Why, shown in the run's last event."""


class ReplanBody(Body, frozen=True, kw_only=True):
    """``POST /runs/{id}/replan``: ask for a new plan round now."""

    reason: Annotated[str, msgspec.Meta(min_length=1, max_length=20_000)]
    """What is wrong and what the new plan must avoid (the planner's model reads it)."""


class Me(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /me``."""

    user: str
    """The user the request's token names: decisions sent with it are recorded as theirs."""


class RunView(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /runs/{id}``: a run's stored state, and where it sits in a team's tree."""

    run_id: str
    goal: str
    status: str
    """``active``, ``finished`` or ``failed``."""
    outcome: str
    """The answer (finished) or the reason (failed); empty while active."""
    owner: str
    """The planner instance holding it."""
    usage: Usage
    started_at: float
    """Unix time it was accepted."""
    parent: ParentStep | None
    """For a sub-team's run: the parent run's step it answers; null for a top-level run."""
    children: list[ChildRun]
    """The sub-team runs its steps started (one per attempt of a ``team`` role's step)."""


class SavedPlanSummary(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /plans``: one plan stored in the deployment, for a submit form."""

    name: str
    goal: str
    """The plan's own goal (with its ``{{name}}`` parameters unfilled)."""
    params: list[str]
    """The names its ``params`` must give a value each."""
    steps: int
    """How many steps it runs."""


class DecisionAnswer(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What the run said of a decision (200): it was taken."""

    outcome: Literal["approved", "rejected"]
    by: str
    """Who decided, as the run's events record it."""
    round: int | None = None
    """The plan round decided on (plan decisions)."""
    digest: str = ""
    """The plan decided on (plan decisions)."""
    edited: bool = False
    """The approved plan is an edit of the one proposed."""
    changes: str = ""
    """What the edit changed."""
    step_id: int | None = None
    """The step decided on (step decisions)."""
    attempt: int = 0
    """Its attempt."""
    run: Literal["", "failed"] = ""
    """``failed``: the rejection ended the run (no plan attempts left)."""
    reason: str = ""
    """Why a rejected step failed, or why the run failed."""


class Accepted(msgspec.Struct, frozen=True, kw_only=True):
    """202 to a cancel or replan request: stored for the run's planner; the run's events
    tell what it did (``event.run.failed``, cause ``cancelled``; ``event.replan``)."""

    run_id: str
    by: str
    """Who asked, as the run's events will name them."""


class Error(msgspec.Struct, frozen=True, kw_only=True):
    """Every refusal: one line that says what is wrong and what to do."""

    error: str
