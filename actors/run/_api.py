"""``RunOps``: what the policies may use of a run, and nothing else.

The policies (``outcomes``, ``plan``, ``review``, ``timers``, ``save``) and the step
transitions (``steps``) are typed against this shape, not against ``Run``: they see the
run's identity, what its planner lends it (``env``), its DAG and per-step knowledge, its
events, the few fields of its rounds they read or change, and a handful of actions.
``Run`` provides it; nothing here imports a policy, so no policy imports ``Run``.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol

import anyio

from protocols import (
    Message,
    PlanDecision,
    ReplanRequest,
    RunRecord,
    RunRequest,
    SynthesisDecision,
    Usage,
)
from runtime.dag import Scheduler, StepState

from .env import RunEnv
from .event_log import EventLog
from .state import RunFailure, StepMeta


class RunOps(Protocol):
    """One driven run, as its policies see it (``Run`` is the one implementation)."""

    # -- what it is, and what it holds (the objects change, the references do not) ------

    @property
    def env(self) -> RunEnv:
        """What the planner driving it lends it: bus, team, tools, model, nonces, owner."""
    @property
    def run_id(self) -> str: ...
    @property
    def request(self) -> RunRequest: ...
    @property
    def fence(self) -> int:
        """The sequence of its owner's fence: part of every message id it sends."""
    @property
    def scheduler(self) -> Scheduler: ...
    @property
    def meta(self) -> dict[int, StepMeta]: ...
    @property
    def events(self) -> EventLog: ...
    @property
    def told(self) -> set[Hashable]:
        """Outcomes a previous owner announced (their late duplicates pass quietly)."""
    @property
    def lock(self) -> anyio.Lock:
        """Held for every change of the run's state."""
    @property
    def scope(self) -> anyio.CancelScope:
        """Cancelled when the run is lost to another planner."""
    @property
    def review_mode(self) -> str:
        """``off``, ``human`` or ``auto``: who approves each plan round."""
    @property
    def gates(self) -> dict[int, tuple[int, float]]:
        """Steps held at their approval gate: the attempt waiting, and until when."""
    @property
    def passed(self) -> set[tuple[int, int]]:
        """Step attempts a person approved."""
    @property
    def republish(self) -> dict[int, str]:
        """Tasks the log shows dispatched, to send again once their inputs are known."""
    @property
    def round_reason(self) -> str: ...
    @property
    def synthesis_round(self) -> int: ...
    @property
    def synthesis_since(self) -> float:
        """Unix time the synthesis was asked for; 0 while none is awaited."""

    # -- what the policies change --------------------------------------------------------

    record: RunRecord
    """The run's header as last changed (its status and outcome once it ends)."""
    usage: Usage
    plan_closed: bool
    replan: ReplanRequest | None
    """A request for a new round that arrived while the run waited."""
    decision: SynthesisDecision | None
    awaiting: tuple[int, str] | None
    """The round and digest of the plan awaiting approval, while one does."""
    plan_decision: PlanDecision | None
    decided: anyio.Event
    """Set when a decision on the awaiting plan has been accepted."""
    refused: int
    """Outcomes refused with an event so far."""

    # -- questions -----------------------------------------------------------------------

    @property
    def holding(self) -> bool:
        """Steps planned now wait for the round's approval before they run."""
    @property
    def never_saved(self) -> bool:
        """No state of this owner's written yet."""
    def state_of(self, step_id: int) -> StepState | None:
        """The step's state; None for ids not in the current plan."""
    def current(self, step_id: int, attempt: int) -> bool:
        """Is this the outcome the run waits for?"""
    def told_outcome(self, step_id: int, attempt: int) -> bool:
        """Does the log already hold this attempt's outcome?"""

    # -- actions -------------------------------------------------------------------------

    def touch(self, step_id: int) -> None:
        """The step's record changed: write it with the next save."""
    async def send(self, subject: str, message: Message, *, msg_id: str,
                   step_id: int = 0, fresh: bool = False) -> None:
        """Send work; it is stored before the state that says so is."""
    async def save(self) -> None:
        """Store what changed; returns once it is stored."""
    async def spent(self, source: str, usage: Usage) -> None:
        """Count a model call's usage (an event)."""
    def abort(self, failure: RunFailure) -> None:
        """End the run with this failure, whatever it is waiting on."""
    def notify(self) -> None:
        """Something the run may be waiting on changed."""
