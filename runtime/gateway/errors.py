"""What goes wrong in gateway/, by name; each message says what to do about it."""

from __future__ import annotations

from ..errors import PlancastError


class GatewayAccessError(PlancastError):
    """The gateway's token cannot be used (a file others can read, a short token ...)."""


class GatewayListenError(PlancastError):
    """The gateway cannot listen where it is asked to (a port in use ...)."""
