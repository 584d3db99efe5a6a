"""A run's progress events, published in order on ``<prefix>.event.<run_id>``.

Every event carries the run id, a per-run sequence number starting at 1 with no gaps,
and the time it was recorded, so a subscriber can replay a run and know it missed
nothing.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from ._base import Message, Usage
from .lineage import ParentStep, RunId
from .plan import Step, StepId


class Event(Message, frozen=True, kw_only=True):
    """Fields shared by every run event."""

    run_id: RunId
    """The run."""
    seq: int = 0
    """1, 2, 3 ... per run, assigned when the event is published."""
    ts: float = 0.0
    """Unix time the event was recorded."""


class RunStarted(Event, frozen=True, kw_only=True, tag="event.run.started"):
    goal: str
    """The run's goal."""
    planner: str = ""
    """The planner instance that owns the run."""
    parent: ParentStep | None = None
    """For a sub-team's run: the parent run's step it answers (so a subscriber can place it
    in the tree); None for a top-level run."""


class PlanStarted(Event, frozen=True, kw_only=True, tag="event.plan.started"):
    round: int
    """0 for the first plan, n for the n-th replan."""
    model: str = ""
    """The planner's model (labelled ``scripted`` when the scripted server answers)."""


class StepPlanned(Event, frozen=True, kw_only=True, tag="event.step.planned"):
    round: int
    """The plan round that produced it."""
    step: Step
    """The step, as validated."""


class PlanRejected(Event, frozen=True, kw_only=True, tag="event.plan.rejected"):
    round: int
    """The plan round."""
    error: str
    """What was wrong with the plan."""
    retrying: bool
    """True if the planner asks its model again with the error."""


class PlanFinished(Event, frozen=True, kw_only=True, tag="event.plan.finished"):
    round: int
    """The plan round."""
    steps: int
    """Steps in this round."""


class StepDispatched(Event, frozen=True, kw_only=True, tag="event.step.dispatched"):
    step_id: StepId
    role: str
    attempt: int


class StepStarted(Event, frozen=True, kw_only=True, tag="event.step.started"):
    step_id: StepId
    attempt: int
    executor: str
    """The instance running it."""
    delivery: int = 0
    """The task's JetStream delivery count (above 1: a redelivery after a silent executor)."""
    heartbeat: float = 0.0
    """Seconds between the executor's heartbeats (0: it sends none)."""
    child_run: str = ""
    """For a step of a ``team`` role: the run its sub-team starts for this attempt (follow
    its events to watch the step inside); empty for other steps."""


class StepFinished(Event, frozen=True, kw_only=True, tag="event.step.finished"):
    step_id: StepId
    attempt: int
    output: str
    """The output, shortened for display when long."""
    executor: str = ""
    duration: float = 0.0
    """Seconds the executor spent."""


class StepFailed(Event, frozen=True, kw_only=True, tag="event.step.failed"):
    step_id: StepId
    attempt: int
    error: str
    will_retry: bool
    """True if another attempt follows; False if the step is given up."""
    cause: str = ""
    """Why, as a word: ``error`` (the executor reported it), ``timeout`` (start-to-close),
    ``heartbeat`` (its executor went silent), ``unserved`` (no live executor of its role),
    ``rejected`` (by the critic), ``review_timeout``, ``dead_letter`` (deliveries ran out),
    ``not_claimed`` (its task was delivered and not claimed within ``[timeouts] claim``),
    ``unclaimed`` (planners before ``not_claimed``: a result came without a claim that
    counts), ``declined`` (a person
    rejected it at its approval gate), ``approval`` (nobody decided at its gate in time),
    ``outcome_unknown`` (a step of an ``effects = "once"`` role or tool may have acted in an
    interrupted attempt and nobody could check: not run again; ``error`` names the
    idempotency key a person should look for)."""


class StepReviewing(Event, frozen=True, kw_only=True, tag="event.step.reviewing"):
    """A step's output went to the critic; ``event.critic.verdict`` follows."""

    step_id: StepId
    attempt: int
    executor: str = ""
    """Whose output is under review."""


class CriticVerdict(Event, frozen=True, kw_only=True, tag="event.critic.verdict"):
    step_id: StepId
    attempt: int
    approved: bool
    critique: str = ""


class UsageRecorded(Event, frozen=True, kw_only=True, tag="event.usage"):
    source: str
    """Who spent it: ``planner``, ``step:3``, ``critic:3``, ``synthesizer``."""
    usage: Usage
    total: Usage
    """The run's total so far."""


class ReplanStarted(Event, frozen=True, kw_only=True, tag="event.replan"):
    round: int
    """The new round's number."""
    reason: str
    source: str


class RunResumed(Event, frozen=True, kw_only=True, tag="event.run.resumed"):
    """Another planner took the run over (its planner stopped renewing its lease)."""

    planner: str
    """The planner instance that now owns the run."""
    previous: str = ""
    """The planner that owned it before."""
    skipped: list[int] = []
    """Event numbers the previous owner gave out but never stored before it was fenced off
    (a write lost in a failover): they will never exist; a reader stops waiting for them.
    Also those it stored after a lost one (they may rest on it, as a step's start on its
    lost dispatch): they do not count, and a reader drops them."""


class WorkFailed(Event, frozen=True, kw_only=True, tag="event.work.failed"):
    """An actor failed to handle one of the run's tasks (model error, crash)."""

    work: str
    """``step``, ``review`` or ``synthesis``."""
    step_id: StepId | None = None
    attempt: int = 0
    actor: str
    """The actor that failed (``role/instance``)."""
    error: str
    will_retry: bool
    """True if the task is delivered again; False if it was given up."""


class OutcomeRefused(Event, frozen=True, kw_only=True, tag="event.outcome.refused"):
    """A result, verdict or decision arrived that cannot count; it was dropped for this reason."""

    kind: str
    """The refused message's type tag (``step.result``, ``review.verdict`` ...)."""
    step_id: StepId | None = None
    attempt: int = 0
    sender: str = ""
    """Who sent it (``role/instance``), when the message says."""
    reason: str
    """Why it does not count (stale attempt, not the claimant, the round is over ...)."""


class RunFinished(Event, frozen=True, kw_only=True, tag="event.run.finished"):
    answer: str
    usage: Usage = Usage()
    """The run's total usage."""


class RunFailed(Event, frozen=True, kw_only=True, tag="event.run.failed"):
    reason: str
    """Why the run cannot finish, and what to change."""
    stage: Literal["plan", "execute", "synthesize", "runtime"] = "runtime"
    usage: Usage = Usage()
    cause: str = ""
    """Why, as a word: ``plan`` (no valid plan), ``model`` (the planner's model failed),
    ``no_replans``, ``deadline`` (the run's timeout), ``synthesis`` (it could not be done),
    ``synthesis_timeout``, ``unserved`` (no live synthesizer), ``approval`` (nobody decided
    on a plan awaiting approval in time), ``storage`` (a stream was full), ``cancelled`` (a
    client's ``run.cancel``), ``step_failed`` (a step with ``on_failure`` "abort" failed),
    ``crash``."""


class PlanAwaitingApproval(Event, frozen=True, kw_only=True,
                           tag="event.plan.awaiting_approval"):
    """The round is planned in full and nothing of it runs until it is decided on."""

    round: int
    digest: str
    """Names this plan: a decision must repeat it."""
    steps: list[Step]
    """The plan awaiting approval."""
    reviewer: Literal["human", "auto"]
    """Who decides: a person (``plancast plan approve``) or the critic."""
    deadline: float
    """Unix time after which the run fails (``[timeouts] approval``)."""


class PlanApproved(Event, frozen=True, kw_only=True, tag="event.plan.approved"):
    """The round's plan was approved; its steps run now."""

    round: int
    by: str
    """Who approved it (``role/instance`` or the name a person gave)."""
    edited: bool = False
    """True if the approved plan is an edit of the one proposed (its steps are planned
    again just after this event)."""
    changes: str = ""
    """What the edit changed, step by step."""


class StepAwaitingApproval(Event, frozen=True, kw_only=True,
                           tag="event.step.awaiting_approval"):
    """The step is ready but runs only once a person approves this attempt."""

    step_id: StepId
    attempt: int
    role: str
    reason: str
    """Why it needs approval (its role, or a tool it may use)."""
    deadline: float
    """Unix time after which the attempt fails (``[timeouts] approval``)."""


class StepApproved(Event, frozen=True, kw_only=True, tag="event.step.approved"):
    """The attempt held at its approval gate may run; it is dispatched next."""

    step_id: StepId
    attempt: int
    by: str
    """Who approved it."""


RunEvent = (
    RunStarted
    | PlanStarted
    | StepPlanned
    | PlanRejected
    | PlanFinished
    | PlanAwaitingApproval
    | PlanApproved
    | StepAwaitingApproval
    | StepApproved
    | StepDispatched
    | StepStarted
    | StepFinished
    | StepFailed
    | StepReviewing
    | CriticVerdict
    | UsageRecorded
    | ReplanStarted
    | RunResumed
    | WorkFailed
    | OutcomeRefused
    | RunFinished
    | RunFailed
)
"""Every event a run can publish; decode one with ``decoder_for(RunEvent)`` (a message read
from the events stream may be a batch: decode it as ``EventMessage``)."""


class EventBatch(Message, frozen=True, kw_only=True, tag="event.batch"):
    """Consecutive events of one run stored as one message: those its planner emitted in
    the same moment (a plan's lines read in one go, results of many steps handled at
    once). A run dispatching hundreds of steps then stores, acknowledges and delivers a
    message per moment instead of one per event.

    Each element is an event exactly as it would travel alone, in sequence order; a reader
    decodes each on its own, so one it does not know is skipped, not the batch. A batch is
    ``schema_version`` 2: a reader that predates it must not take the stream for gapless.
    """

    schema_version: int = 2
    run_id: RunId
    """The run all the events belong to."""
    events: list[msgspec.Raw]
    """The events, each an ``event.*`` message as JSON."""


EventMessage = RunEvent | EventBatch
"""What one message on ``<prefix>.event.<run_id>`` decodes to: an event, or a batch."""

TERMINAL_EVENTS = (RunFinished, RunFailed)
