"""Run state as the planner stores it in the run-state KV bucket.

Two kinds of keys, so a save costs the same at step 5 and at step 5,000:

- ``runs.<run_id>``: the run's header (``RunRecord``), small, written with
  compare-and-set on its revision by the planner holding the run's lease, so a planner
  that lost the run learns it on its next write and stops;
- ``runs.<run_id>.steps.<step_id>``: one ``StepRecord`` per step, written when that step
  changes (alongside a header write);
- ``runs.<run_id>.ended.<n>``: in a run's last state, the records of the steps that had
  none of their own (their events said all), several per entry (``StepRecords``): one
  write per entry instead of one per step.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from ._base import Message, ObjectRef, Usage
from .lineage import RunId
from .messages import RunRequest
from .plan import Step

StepStatus = Literal["pending", "ready", "running", "done", "failed"]


def run_key(run_id: str) -> str:
    """The key of a run's header."""
    return f"runs.{run_id}"


def step_key(run_id: str, step_id: int) -> str:
    """The key of one step's record."""
    return f"runs.{run_id}.steps.{step_id}"


def step_keys(run_id: str) -> str:
    """The pattern matching every step record of a run."""
    return f"runs.{run_id}.steps.*"


def ended_key(run_id: str, number: int) -> str:
    """The key of the ``number``-th entry of an ended run's step records (from 0)."""
    return f"runs.{run_id}.ended.{number}"


class StepRecord(Message, frozen=True, kw_only=True, tag="run.step"):
    """One step's state within a run (key ``runs.<run_id>.steps.<step_id>``)."""

    step: Step
    """The step as planned."""
    round: int
    """The plan round that produced it."""
    status: StepStatus
    """Where it is in its life."""
    attempt: int = 1
    """The current attempt."""
    output: str | None = None
    """The output (done) when small; else ``output_ref``."""
    output_ref: ObjectRef | None = None
    """The output in the object store, when large."""
    error: str = ""
    """Why it failed (failed)."""
    executor: str = ""
    """The executor that claimed the current attempt last (outcomes from others are stale)."""
    delivery: int = 0
    """That claim's JetStream delivery count."""
    review_output: str | None = None
    """An output waiting for the critic's verdict."""
    feedback: str = ""
    """The critic's last critique, sent with the next attempt."""
    usage: Usage = Usage()
    """Model usage spent on the step (executor and critic), all attempts."""
    claimants: list[str] = []
    """Every ``executor#delivery`` that claimed the current attempt; a result counts only
    from one of them."""
    dispatched_at: float = 0.0
    """Unix time the current attempt was dispatched (its timers start here)."""
    claimed_at: float = 0.0
    """Unix time of the current attempt's latest claim (start-to-close counts from here)."""
    heartbeat: float = 0.0
    """The latest claimant's heartbeat interval (0: it sends none)."""
    task_seq: int = 0
    """The current attempt's task in the work stream (deleted when the attempt is given up)."""
    task_id: str = ""
    """The ``Nats-Msg-Id`` the current attempt's task was published with."""
    check_keys: list[str] = []
    """Idempotency keys of interrupted attempts of an ``effects = "once"`` step whose outcome
    is not known yet (its next attempt asks the tool about them before it acts)."""


class StepRecords(Message, frozen=True, kw_only=True, tag="run.steps"):
    """Step records of an ended run stored as one entry (key ``runs.<run_id>.ended.<n>``):
    those of the steps that had no record of their own when the run ended."""

    records: list[msgspec.Raw]
    """The records, each a ``run.step`` message as JSON, exactly as it would be stored
    alone (a reader decodes each on its own)."""


class RunRecord(Message, frozen=True, kw_only=True, tag="run.state"):
    """Everything a planner needs to resume a run where another one stopped."""

    run_id: RunId
    """The run."""
    request: RunRequest
    """What the client asked for."""
    status: Literal["active", "finished", "failed"] = "active"
    """``active`` until the run ends."""
    owner: str = ""
    """The planner instance holding the lease."""
    lease_until: float = 0.0
    """Unix time the lease ends unless renewed; after it another planner may take over."""
    round: int = 0
    """The current plan round."""
    plan_closed: bool = False
    """True once the current round's plan has fully streamed and validated."""
    round_reason: str = ""
    """Why the current round was planned (empty for the first plan)."""
    synthesis_round: int = -1
    """The round whose synthesis was requested (-1: none yet)."""
    order: list[int] = []
    """Step ids in emission order, across rounds (each has a step record, but those in
    ``replayed``; in an ended run's last state, its own or in an ``ended`` entry)."""
    dropped: list[int] = []
    """Ids of earlier rounds' unfinished steps: taken, never reused."""
    next_seq: int = 1
    """The sequence number of the run's next event."""
    usage: Usage = Usage()
    """The run's usage so far, all roles."""
    outcome: str = ""
    """The answer (finished) or the reason (failed)."""
    started_at: float = 0.0
    """Unix time the run was accepted."""
    updated_at: float = 0.0
    """Unix time of this record."""
    deadline: float = 0.0
    """Unix time the run fails if it has not ended (0: no deadline)."""
    events_seq: int = 0
    """A planner taking the run over reads the run's events stored after this stream
    sequence: those numbered ``next_seq`` and on (changes not in this record), and before
    them the events of the steps in ``replayed``."""
    replayed: list[int] = []
    """Steps of an active run with no step record: planned, and perhaps dispatched,
    claimed and finished with their whole output, but nothing more (their events say all;
    writing a record for each would cost as much as the step). A takeover rebuilds them
    from their events, which ``events_seq`` keeps within the replay; the run's last state
    has a record of every step."""
    steps_done: int = 0
    """Steps finished so far, those in ``replayed`` included (``plancast runs``)."""
    announced: list[str] = []
    """Outcomes the log already tells but whose messages this state has not applied yet
    (a takeover's replay), each as a JSON array: they are not told again."""
    fence: int = 0
    """Stream sequence of the owner's ``run.owner`` fence message; every event it publishes
    expects it to be the last one, so a planner that lost the run cannot add events."""
    ended: int = 0
    """Entries ``runs.<run_id>.ended.0`` to ``ended - 1`` (``StepRecords``) hold the
    records of the steps with none under ``runs.<run_id>.steps.<step_id>``: written with
    the run's last state (entries numbered from ``ended`` on are stale; ignore them)."""


class RunOwner(Message, frozen=True, kw_only=True, tag="run.owner"):
    """A planner took a run on (``<prefix>.fence.<run_id>``, in the events stream).

    Each event the owner publishes carries ``Nats-Expected-Last-Subject-Sequence`` = this
    message's sequence, with ``Nats-Expected-Last-Subject-Sequence-Subject`` = this subject:
    once another planner takes the run over, the server refuses the old owner's events.
    """

    run_id: RunId
    """The run."""
    owner: str
    """The planner instance (``role/instance``)."""
    ts: float
    """Unix time it took the run on."""
