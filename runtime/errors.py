"""The base of plancast's exceptions. Each package keeps its own in its ``errors.py``,
named for what went wrong, with messages that say what to do, and its face exports them."""

from __future__ import annotations


class PlancastError(Exception):
    """Base class of every error plancast raises on purpose (``tests/test_errors.py``
    checks each public one); an exception that never leaves its module is ``_private``."""


class SetupError(PlancastError):
    """A deployment mistake no restart can fix (a consumer nobody provisioned, a missing
    API key): a supervisor gives up at once and says what to do, instead of restarting."""
