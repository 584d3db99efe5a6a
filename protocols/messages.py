"""Work and control messages: what actors send each other."""

from __future__ import annotations

import secrets
from typing import Annotated, Literal

import msgspec

from ._base import Message, ObjectRef, Usage
from .lineage import TOKEN_PATTERN, ParentStep, RunId
from .plan import Plan, Step, StepId


def new_run_id() -> str:
    """A fresh run id: ``run-`` and 12 hex digits (clients and planners pick them alike)."""
    return f"run-{secrets.token_hex(6)}"


def nonce() -> str:
    """16 random bytes, URL-safe: a secret nobody else can guess."""
    return secrets.token_urlsafe(16)


def cancel_id(run_id: str) -> str:
    """A ``run.cancel``'s ``Nats-Msg-Id``: random, so nobody can store a message under it
    first and have the cancel dropped as its duplicate."""
    return f"{run_id}/cancel/{nonce()}"


class RunRequest(Message, frozen=True, kw_only=True, tag="run.request"):
    """A client asks for a goal to be planned and run (request/reply on ``run.submit``)."""

    goal: Annotated[str, msgspec.Meta(min_length=1, max_length=20_000)]
    """What the team should achieve, in natural language."""
    run_id: RunId | None = None
    """Chosen by the client to make the submit idempotent; the planner picks one if None."""
    max_replans: Annotated[int, msgspec.Meta(ge=0, le=10)] = 1
    """Replan rounds allowed after the first plan."""
    max_steps: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 64
    """Most steps one plan may have."""
    timeout: Annotated[float, msgspec.Meta(gt=0, le=30 * 86_400)] | None = None
    """Seconds the whole run may take before it fails; None uses the team's ``[timeouts] run``
    (none by default)."""
    plan: list[Step] | None = None
    """Steps to run as the first plan instead of asking the planner's model (a saved plan);
    replans, if any, ask the model as usual."""
    review_plan: Literal["off", "human", "auto"] | None = None
    """Hold each plan round for approval before any of it runs: by a person (``human``) or
    the critic (``auto``); None uses the team's ``review_plan``."""
    parent: ParentStep | None = None
    """For a sub-team's run: the parent run's step it answers; None for a top-level run."""
    roles: list[Annotated[str, msgspec.Meta(pattern=TOKEN_PATTERN)]] | None = None
    """The executor roles this run's plans may use (a sub-team's members); None: every
    executor role of the planner's team (or its planner's ``members``)."""
    planner_prompt: Annotated[str, msgspec.Meta(max_length=20_000)] = ""
    """A brief added to the planner's system prompt for this run's plans (a sub-team's)."""
    synthesizer: Annotated[str, msgspec.Meta(pattern=r"^([A-Za-z0-9_-]{1,64})?(?![\s\S])")] = ""
    """The synthesizer role that joins this run (its tasks go to ``synthesis-for.<role>``);
    empty: any synthesizer, on ``synthesis``."""


class RunAccepted(Message, frozen=True, kw_only=True, tag="run.accepted"):
    """The reply to a RunRequest that the planner took on."""

    run_id: RunId
    """The run's id."""
    events_subject: str
    """Where the run's progress events are published (and replayable from)."""


class RunRejected(Message, frozen=True, kw_only=True, tag="run.rejected"):
    """The reply to a RunRequest that could not be accepted."""

    reason: str
    """Why, and what to change."""
    retryable: bool = False
    """The request is fine but could not be stored now (the cluster is electing a leader,
    a timeout): send it again with the same ``run_id``; never a refusal of the request."""


class StepTask(Message, frozen=True, kw_only=True, tag="step.task"):
    """A step handed to an executor of ``step.role`` (on ``<prefix>.step.<role>``)."""

    run_id: RunId
    """The run the step belongs to."""
    goal: str
    """The run's goal, as context for agent steps."""
    step: Step
    """The step to run."""
    attempt: int = 1
    """1 for the first try; a result for an older attempt is stale and ignored."""
    deadline: float = 0.0
    """Unix time after which the result is no longer wanted (0 = none): the run's deadline."""
    timeout: float = 0.0
    """Seconds the executor may spend on this attempt once started (0 = no limit); the planner
    fails the attempt soon after, whether or not the executor answers."""
    inputs: dict[int, str] = {}
    """Outputs of the steps this one depends on, by step id: for an agent step, all its
    dependencies; for a tool step, those its ``code`` argument refers to (other arguments
    arrive with ``$N`` substituted). A task too large for a message is offloaded whole."""
    feedback: str = ""
    """The critic's critique of the previous attempt, when it was rejected."""
    nonce: str = ""
    """A secret of this task's sender and receiver: the receiver sends it back in every
    answer (``nonce``), which counts only with it, and puts it in the answer's
    ``Nats-Msg-Id``, so nobody else can publish first under that id (the stream would
    then drop the real answer as a duplicate)."""
    idempotency_key: str = ""
    """The attempt's idempotency key: the same on every delivery of this attempt (and after
    a planner takeover), another for the next attempt, and computable only by the planners.
    Hand it to the outside world where it takes one (an ``Idempotency-Key`` header), so a
    side effect repeated by a redelivery is done once. Empty from planners before it."""
    effects: str = ""
    """``once``: the step's role or tool must not act twice (team file ``effects``): do not
    run it blindly where an earlier execution may have acted (``check_keys``, or a
    delivery count above 1); ask the tool, or answer ``cause`` ``outcome_unknown``.
    ``none``: the step's tool has no effect on the world: its finished attempt need not
    be recorded (it may run again)."""
    check_keys: list[str] = []
    """With ``effects`` ``once``: idempotency keys of earlier attempts of this step that
    were interrupted (timed out, their executor went silent) and may have acted. Before
    acting, ask the tool whether each was done; if it cannot tell, do not act."""


class StepClaimed(Message, frozen=True, kw_only=True, tag="step.claimed"):
    """An executor started an attempt of a step (the planner turns it into an event)."""

    run_id: RunId
    """The run."""
    step_id: StepId
    """The step."""
    attempt: int
    """The attempt started."""
    executor: str
    """The instance working on it (``role/instance``)."""
    delivery: int = 1
    """JetStream's delivery count: a redelivered task has a higher one (fences stale work)."""
    heartbeat: float = 0.0
    """Seconds between the claimant's heartbeats, which list the step while it works on it;
    0 if it sends none (then only the step's timeout tells it is gone)."""
    nonce: str = ""
    """The ``nonce`` of the task this answers: proof that its sender received that task.
    Required: the planner refuses an answer without it (``runtime.nonces``)."""


class StepStop(Message, frozen=True, kw_only=True, tag="step.stop"):
    """The run's planner gave this attempt up (the run failed or was cancelled, the attempt
    ran out of time, a replan dropped it): the executor running it stops and answers
    nothing. Core NATS on ``<prefix>.stop.<role>``, best effort: an executor that misses it
    runs the attempt to its end, and its result is refused."""

    run_id: RunId
    """The run."""
    step_id: StepId
    """The step."""
    attempt: int
    """The attempt given up."""
    reason: str = ""
    """Why, as the run's events say it."""
    nonce: str = ""
    """The attempt's task ``nonce``: a stop counts only with it (only the task's sender and
    its executors know it)."""


class StepResult(Message, frozen=True, kw_only=True, tag="step.result"):
    """An executor's outcome for one attempt of one step."""

    run_id: RunId
    """The run the step belongs to."""
    step_id: StepId
    """The step."""
    attempt: int
    """The attempt this outcome is for."""
    ok: bool
    """True if the step produced an output; False if it failed."""
    output: str | None = None
    """The output, when it fits in a message."""
    output_ref: ObjectRef | None = None
    """The output, when it was too large and went to the object store."""
    error: str = ""
    """What went wrong, when ``ok`` is False."""
    retryable: bool = True
    """False when another attempt cannot help (bad arguments, unknown tool)."""
    usage: Usage = Usage()
    """Model usage spent on the step."""
    started_at: float = 0.0
    """Unix time the executor started the step."""
    finished_at: float = 0.0
    """Unix time the executor finished the step."""
    executor: str = ""
    """The instance that ran it (``role/instance``); required: a result counts only after a
    ``step.claimed`` by the same executor for the same delivery."""
    delivery: int = 0
    """The JetStream delivery count of the task this result answers (as in its claim);
    required, like ``executor`` (0 never matches a claim)."""
    claims: bool = False
    """True: this result is also its sender's claim (the step ended before a claim was
    due, so none was sent); the planner records the claim, then the result. Needs a
    planner that knows this field (upgrade planners before executors)."""
    heartbeat: float = 0.0
    """With ``claims``: what the claim's ``heartbeat`` would have said."""
    nonce: str = ""
    """The ``nonce`` of the task this answers: proof that its sender received that task.
    Required: the planner refuses an answer without it (``runtime.nonces``)."""
    cause: str = ""
    """Why it failed, when not the tool's own error: ``timeout`` (the executor stopped it at
    the task's ``timeout``: it may have acted), ``outcome_unknown`` (a ``once`` step an
    earlier execution may have done, which the tool cannot check: not run; a person must
    look). Planners before this field read both as an error."""


class StepOutcomes(Message, frozen=True, kw_only=True, tag="step.outcomes"):
    """Claims and results of one executor for steps of one run, sent as one message: those
    that came in the same moment (a hundred 50 ms steps started together end together).
    The run's planner then stores, acknowledges and handles one message, not a hundred.

    Each element is applied exactly as if it had come alone, in order (a claim before the
    result it precedes). A sender may always send them one by one instead.
    """

    run_id: RunId
    """The run every element belongs to."""
    outcomes: list[StepClaimed | StepResult]
    """The claims and results, in the order they were made."""


class SynthesisTask(Message, frozen=True, kw_only=True, tag="synthesis.task"):
    """The DAG is done: the synthesizer joins the results or asks for another round."""

    run_id: RunId
    """The run."""
    goal: str
    """The run's goal."""
    plan: Plan
    """Every step planned so far."""
    results: dict[int, str] = {}
    """Each finished step's output, by step id."""
    failures: dict[int, str] = {}
    """Each failed step's error, by step id."""
    replans_left: int = 0
    """How many more rounds the synthesizer may ask for; 0 means it must finish."""
    nonce: str = ""
    """A secret of this task's sender and receiver: the receiver puts it in the
    ``Nats-Msg-Id`` of its answer, so nobody else can publish first under that id (the
    stream would then drop the real answer as a duplicate)."""


class SynthesisDecision(Message, frozen=True, kw_only=True, tag="synthesis.decision"):
    """The synthesizer's answer, or its reason for another plan round."""

    run_id: RunId
    """The run."""
    round: int
    """The plan round this decision closes."""
    action: Literal["finish", "replan"]
    """``finish`` with an answer, or ``replan`` with a reason."""
    answer: str = ""
    """The final answer, when finishing."""
    reason: str = ""
    """Why another round is needed, when replanning."""
    usage: Usage = Usage()
    """Model usage spent on the synthesis."""
    nonce: str = ""
    """The ``nonce`` of the task this answers: proof that its sender received that task.
    Required: the planner refuses an answer without it (``runtime.nonces``)."""


class RunCancel(Message, frozen=True, kw_only=True, tag="run.cancel"):
    """A client asks the planner to stop a run (on ``<prefix>.result.<run_id>.client``): it
    ends with ``event.run.failed``, cause ``cancelled``, and its queued work is dropped."""

    run_id: RunId
    """The run."""
    reason: str = ""
    """Why, in the client's words."""
    source: str = ""
    """Who asks (a user, a host, a program)."""


class ReplanRequest(Message, frozen=True, kw_only=True, tag="run.replan"):
    """Someone other than the synthesizer asks the planner for a new round."""

    run_id: RunId
    """The run."""
    reason: str
    """What went wrong and what the new plan must avoid."""
    source: str
    """Who asks: ``supervisor``, ``critic``, ``executor`` or a client."""
    failed_step: StepId | None = None
    """The step that could not be completed, if any."""
    work: Literal["", "step", "review", "synthesis"] = ""
    """Which work could not be done (``""``: none in particular, just replan)."""
    attempt: int = 0
    """The failed step's attempt (0: unknown, taken as the current one)."""
    nonce: str = ""
    """With ``work``: the ``nonce`` of the task given up (a dead letter holds it), proof
    that the work named is the work given up."""


class WorkError(Message, frozen=True, kw_only=True, tag="work.error"):
    """An actor failed to handle one of a run's tasks (a model error, a crash).

    Sent on ``<prefix>.result.<run_id>.<role>`` so the planner records it as a ``work.failed``
    event; the task itself is retried (``will_retry``) or dead-lettered.
    """

    run_id: RunId
    """The run."""
    work: Literal["step", "review", "synthesis"]
    """The kind of task."""
    step_id: StepId | None = None
    """The step, for step and review tasks."""
    attempt: int = 0
    """The step's attempt, for step and review tasks."""
    actor: str
    """The actor that failed (``role/instance``)."""
    delivery: int = 1
    """The task's JetStream delivery count."""
    error: str
    """What went wrong, in one line."""
    will_retry: bool
    """True if the task will be delivered again; False if it was given up (dead-lettered)."""
    setup_error: bool = False
    """True if the failure is a configuration mistake no retry can fix (a model server that
    refuses the structured-output dialect of its preset): the run fails at once with it."""
    usage: Usage = Usage()
    """Model calls the failed attempt made, counted in the run's usage (a request that got
    no answer is a call of unknown tokens)."""
    nonce: str = ""
    """The ``nonce`` of the task this answers: proof that its sender received that task.
    Required: the planner refuses an answer without it (``runtime.nonces``)."""


class Heartbeat(Message, frozen=True, kw_only=True, tag="actor.heartbeat"):
    """An actor's periodic sign of life (core NATS, ``<prefix>.heartbeat.<role>.<instance>``)."""

    role: str
    """The actor's role."""
    instance: str
    """Unique per actor process and role."""
    host: str
    """Hostname of the machine it runs on."""
    pid: int
    """Its process id."""
    started_at: float
    """Unix time the actor started."""
    ts: float
    """Unix time of this beat."""
    interval: float
    """Seconds until the next beat; silence for a few intervals means it is gone."""
    in_flight: list[str] = []
    """Work in hand, as ``run_id/step_id`` (or a subject for non-step work)."""
    handled: int = 0
    """Messages handled since start."""
    restarts: int = 0
    """Times its supervisor restarted it."""
    draining: bool = False
    """True once it stopped taking new work before exiting."""
    tools: list[str] = []
    """Tools it may run: its role's, MCP servers' included (``SERVER__TOOL``)."""


class ActorError(Message, frozen=True, kw_only=True, tag="actor.error"):
    """A message an actor could not handle: published on ``<prefix>.error.<role>``."""

    role: str
    """The actor's role."""
    instance: str
    """The actor instance."""
    subject: str
    """The subject the bad message arrived on."""
    reason: str
    """What was wrong with it, and what to do."""
    size: int = 0
    """The payload's size in bytes."""
    excerpt: str = ""
    """The start of the payload, for diagnosis (decoded leniently)."""
    dead_letter: str = ""
    """Subject the raw payload was copied to, if it was kept."""
    traceback: str = ""
    """The last frames of a handler exception's traceback."""
    ts: float = 0.0
    """Unix time of the failure."""


class Offloaded(Message, frozen=True, kw_only=True, tag="message.offloaded"):
    """Stands in for a message too large to send: the message itself is in the object store.

    Readers fetch ``ref`` and decode its bytes as the message; any plancast actor and
    ``plancast.client.follow`` do this transparently.
    """

    ref: ObjectRef
    """Where the encoded message is."""
    inner_type: str
    """The stored message's ``type`` tag, for logs and routing."""
