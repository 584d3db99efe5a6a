"""What goes wrong in client/, by name; each message says what to do about it."""

from __future__ import annotations

from ..errors import PlancastError


class RunNotAccepted(PlancastError):
    """The planner refused the run, or no planner answered."""


class RunRefused(RunNotAccepted):
    """A planner answered ``run.rejected``: the request itself cannot run (the reason says
    what to change), unlike no planner answering."""


class RunStalled(PlancastError):
    """A followed run published no event for longer than the caller's ``idle_timeout``."""


class PlanFileError(PlancastError):
    """A saved plan cannot be read, filled or run; the message says what to change."""


class NothingAwaitsApproval(PlancastError):
    """The run holds no plan for approval now (it has none, or it was decided)."""
