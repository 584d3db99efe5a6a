"""What the command line refuses on its own account (the rest comes from the packages)."""

from __future__ import annotations

from ..errors import PlancastError


class TeamMismatch(PlancastError):
    """A command was given a team other than the one the local deployment it would join
    serves: it would run that one instead, so it refuses and says how to get the one given."""
