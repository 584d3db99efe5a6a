"""What goes wrong in config/, by name; each message says what to do about it."""

from __future__ import annotations

from ..errors import PlancastError, SetupError


class ModelConfigError(SetupError):
    """A model client cannot be built from its settings (no API key, bad URL ...).

    Raised before any request is made; the message names the setting or environment
    variable to fix.
    """


class TeamConfigError(PlancastError):
    """The team file is missing, not TOML, or breaks a rule; the message names the fix."""
