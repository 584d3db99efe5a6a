"""What goes wrong in dag/, by name; each message says what to do about it."""

from __future__ import annotations

from ..errors import PlancastError


class PlanValidationError(PlancastError):
    """A step or a whole plan breaks a rule of the plan DAG.

    The message is shown to the planner's model when it is asked again, and to users,
    so it names the step, says what is wrong and how to fix the plan.
    """

    def __init__(self, message: str, *, step_id: int | None = None) -> None:
        super().__init__(message)
        self.step_id = step_id
        """The offending step, if the error is about one step."""


class StepStateError(PlancastError):
    """A step was moved in a way its state does not allow (a caller bug or a stale result)."""
