"""What goes wrong in tools/, by name; each message says what to do about it."""

from __future__ import annotations

from ..config import TeamConfigError
from ..errors import PlancastError


class ToolError(PlancastError):
    """A tool ran and failed; the message says why (exit code, stderr tail, timeout ...).

    Executors report it as the step's failure, and the critic reads it to reject code that
    does not run, so it is written for a model to act on.
    """


class UnknownTool(PlancastError):
    """A plan or a model asked for a tool that is not registered; the message lists known ones."""


class ToolArgumentsError(PlancastError):
    """A tool was called with arguments that do not fit it; the message says what it expects."""


class ToolInputError(ToolArgumentsError, ToolError):
    """A tool refused what its arguments say (a syntax error, a name it does not know): the
    same arguments fail the same way, so the step is not retried as is and the replan
    reads the message. Tools raise it for failures that are the arguments' fault."""


class UnsupportedArchitecture(PlancastError, RuntimeError):
    """No system call table for this machine: the sandbox cannot be filtered here."""


class McpUnavailable(TeamConfigError):
    """A team file declares MCP servers but the ``mcp`` SDK is not installed."""
