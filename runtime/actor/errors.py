"""What goes wrong in actor/, by name; each message says what to do about it."""

from __future__ import annotations

from ..errors import PlancastError


class UnknownRole(PlancastError):
    """A role (or its kind) is not configured or not installed; the message lists what is."""
