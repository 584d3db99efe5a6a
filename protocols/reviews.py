"""Reviews and approvals: what the critic is asked and answers, and the decisions people
(or the critic, for an ``auto`` review) take on plans and on steps held at a gate."""

from __future__ import annotations

from ._base import Message, Usage
from .lineage import RunId
from .plan import Step, StepId


class ReviewTask(Message, frozen=True, kw_only=True, tag="review.task"):
    """A finished step's output sent to the critic before it counts."""

    run_id: RunId
    """The run."""
    goal: str
    """The run's goal."""
    step: Step
    """The step that produced the output."""
    attempt: int
    """The attempt under review."""
    output: str
    """The output to judge."""
    inputs: dict[int, str] = {}
    """The step's inputs, so the critic sees what the executor saw."""
    nonce: str = ""
    """A secret of this task's sender and receiver: the receiver puts it in the
    ``Nats-Msg-Id`` of its answer, so nobody else can publish first under that id (the
    stream would then drop the real answer as a duplicate)."""


class PlanReviewTask(Message, frozen=True, kw_only=True, tag="plan.review"):
    """A plan round awaiting approval, sent to the critic when the run's review is ``auto``
    (on ``<prefix>.review``); it answers with a PlanDecision."""

    run_id: RunId
    """The run."""
    goal: str
    """The run's goal."""
    round: int
    """The plan round under review."""
    digest: str
    """Names the plan under review; the decision repeats it."""
    steps: list[Step]
    """The round's steps."""
    done: dict[int, str] = {}
    """Outputs of steps finished in earlier rounds, which the plan may use."""
    policy: str = ""
    """What the plan must respect (the team's ``plan_policy``)."""
    nonce: str = ""
    """Goes into the ``Nats-Msg-Id`` of the answer (see ``ReviewTask.nonce``)."""


class PlanDecision(Message, frozen=True, kw_only=True, tag="plan.decision"):
    """The answer to a plan awaiting approval, on ``<prefix>.result.<run_id>.<sender>``
    (``client`` for a person, the critic's role for ``auto``): approve it, as written or
    edited, or reject it with a reason (the planner's model then writes it again)."""

    run_id: RunId
    """The run."""
    round: int
    """The plan round decided on."""
    digest: str
    """The ``digest`` of the plan decided on, from ``event.plan.awaiting_approval``: a
    decision on any other plan is refused."""
    approved: bool
    """True runs the plan (``steps`` if given); False sends it back with ``reason``."""
    steps: list[Step] | None = None
    """An edited plan that replaces the round's steps; checked like the model's."""
    reason: str = ""
    """Why it was rejected (or what the edit changes)."""
    by: str = ""
    """Who decided (a person, a program, a critic), for the run's record."""
    usage: Usage = Usage()
    """The critic's model usage, for an ``auto`` review."""
    nonce: str = ""
    """For an ``auto`` review: the ``nonce`` of the ``plan.review`` it answers (the
    critic's decision counts only with it)."""


class StepDecision(Message, frozen=True, kw_only=True, tag="step.decision"):
    """A person's answer to a step held at its approval gate (a role with ``approval`` or
    a tool in ``approve_tools``), on ``<prefix>.result.<run_id>.client``."""

    run_id: RunId
    """The run."""
    step_id: StepId
    """The step awaiting approval."""
    attempt: int
    """Its attempt (from ``event.step.awaiting_approval``): each attempt is approved anew."""
    approved: bool
    """True lets it run; False fails it (``on_failure`` says what then)."""
    reason: str = ""
    """Why it was rejected."""
    by: str = ""
    """Who decided, for the run's record."""


class Verdict(Message, frozen=True, kw_only=True, tag="review.verdict"):
    """The critic's judgement on one attempt of one step."""

    run_id: RunId
    """The run."""
    step_id: StepId
    """The step judged."""
    attempt: int
    """The attempt judged."""
    approved: bool
    """True if the output may count as the step's result."""
    critique: str = ""
    """What is wrong (on rejection) or what was checked (on approval)."""
    usage: Usage = Usage()
    """Model usage spent on the review."""
    nonce: str = ""
    """The ``nonce`` of the task this answers: proof that its sender received that task.
    Required: the planner refuses an answer without it (``runtime.nonces``)."""
