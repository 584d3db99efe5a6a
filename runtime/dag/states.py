"""Where each step of a plan is in its life, and the map the scheduler keeps them in."""

from __future__ import annotations

import enum


class StepState(enum.Enum):
    """Where a step is in its life."""

    PENDING = "pending"
    """Declared, waiting for dependencies (or blocked forever behind a failed one)."""
    READY = "ready"
    """Every dependency is done; waiting to be dispatched."""
    RUNNING = "running"
    """Dispatched (or under review); the outcome has not been reported."""
    DONE = "done"
    """Finished with an output that counts."""
    FAILED = "failed"
    """Failed; its dependents cannot run unless it is retried."""


_BUSY = frozenset({StepState.READY, StepState.RUNNING})


class StepStates(dict[int, StepState]):
    """Step id -> state, counting the busy steps (ready or running) as states change:
    whether a round is done is asked after every outcome, and scanning every step each
    time made a wide plan cost its planner time quadratic in its steps. Only ``[]=`` and
    ``del`` keep the count: the scheduler changes states with nothing else."""

    busy = 0

    def __init__(self, states: dict[int, StepState]) -> None:
        super().__init__()
        for sid, state in states.items():
            self[sid] = state

    def __setitem__(self, sid: int, state: StepState) -> None:
        self.busy += (state in _BUSY) - (self.get(sid) in _BUSY)
        super().__setitem__(sid, state)

    def __delitem__(self, sid: int) -> None:
        self.busy -= self[sid] in _BUSY
        super().__delitem__(sid)
