"""Which step a tool is running for, for tools whose side effects must be keyed by attempt."""

from __future__ import annotations

import base64
import hashlib
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
    idempotency_key: str = ""
    """The attempt's idempotency key: the same on every delivery of this attempt, and after
    a planner takeover; another on the next attempt. Hand it to an API that takes one
    (``Idempotency-Key``) so a repeat of this attempt's side effect is done once. Agent
    steps: one key for all the step's tool calls (add a suffix of your own per call)."""

    @property
    def key(self) -> str:
        """A unique key for this execution of the step: ``run/step/attempt/task/delivery``."""
        return f"{self.run_id}/{self.step_id}/{self.attempt}/{self.task}/{self.delivery}"


current_step: ContextVar[StepContext | None] = ContextVar("current_step", default=None)
"""Set by the executor around every tool call it makes for a step."""


def attempt_key(run_id: str, step_id: int, attempt: int, nonce: str) -> str:
    """An idempotency key for a task from a planner that sent none (before the field): a
    digest of its nonce, which only the planners could compute, so it is as stable and as
    hard to guess as the planner's own."""
    digest = hashlib.sha256(f"plancast-idempotency\0{run_id}\0{step_id}\0{attempt}\0"
                            f"{nonce}".encode()).digest()
    return "pc-" + base64.urlsafe_b64encode(digest[:16]).decode().rstrip("=")
