"""Which step a tool is running for, for tools whose side effects must be keyed by attempt."""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field


@dataclass(frozen=True)
class StepContext:
    run_id: str
    step_id: int
    attempt: int
    delivery: int
    """JetStream's delivery count: >1 when the task was redelivered after a failure."""
    executor: str
    """``role/instance`` of the executor running it."""
    task: int = 0
    """The task's sequence in the work stream (two tasks may carry one attempt after a
    planner takeover; each is its own execution)."""
    inputs: Mapping[int, str] = field(default_factory=dict)
    """Outputs of the steps this one depends on (bound as data into program text)."""

    @property
    def key(self) -> str:
        """A unique key for this execution of the step: ``run/step/attempt/task/delivery``."""
        return f"{self.run_id}/{self.step_id}/{self.attempt}/{self.task}/{self.delivery}"


current_step: ContextVar[StepContext | None] = ContextVar("current_step", default=None)
"""Set by the executor around every tool call it makes for a step."""
