"""Run state as the planner stores it in the run-state KV bucket (key ``runs.<run_id>``).

Written only by the planner that holds the run's lease, always with compare-and-set on
the entry's revision, so a planner that lost the run cannot overwrite its new owner.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from ._base import Message, ObjectRef, Usage
from .messages import RunId, RunRequest
from .plan import Step

StepStatus = Literal["pending", "ready", "running", "done", "failed"]


class StepRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One step's state within a run."""

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
    steps: list[StepRecord] = []
    """Every step, in emission order, across rounds (dropped ones removed)."""
    dropped: list[int] = []
    """Ids of earlier rounds' unfinished steps: taken, never reused."""
    next_seq: int = 1
    """The sequence number of the run's next event."""
    usage: Usage = Usage()
    """Usage so far."""
    outcome: str = ""
    """The answer (finished) or the reason (failed)."""
    started_at: float = 0.0
    """Unix time the run was accepted."""
    updated_at: float = 0.0
    """Unix time of this record."""
