"""What goes wrong in worker/, by name; each message says what to do about it."""

from __future__ import annotations

from ..errors import PlancastError


class SupervisorEscalation(PlancastError):
    """Children crashed more often than the restart intensity allows; all were stopped."""


class ChildExited(PlancastError):
    """A child process exited with a non-zero status or a signal."""
