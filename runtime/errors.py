"""plancast's own exceptions, named for what went wrong; messages say what to do about it."""

from __future__ import annotations


class PlancastError(Exception):
    """Base class of every error plancast raises on purpose (``tests/test_errors.py``
    checks each public one); an exception that never leaves its module is ``_private``."""


class SetupError(PlancastError):
    """A deployment mistake no restart can fix (a consumer nobody provisioned, a missing
    API key): a supervisor gives up at once and says what to do, instead of restarting."""


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


class ToolError(PlancastError):
    """A tool ran and failed; the message says why (exit code, stderr tail, timeout ...).

    Executors report it as the step's failure, and the critic reads it to reject code that
    does not run, so it is written for a model to act on.
    """


class UnknownTool(PlancastError):
    """A plan or a model asked for a tool that is not registered; the message lists known ones."""


class ToolArgumentsError(PlancastError):
    """A tool was called with arguments that do not fit it; the message says what it expects."""


class ModelConfigError(SetupError):
    """A model client cannot be built from its settings (no API key, bad URL ...).

    Raised before any request is made; the message names the setting or environment
    variable to fix.
    """


class ModelError(PlancastError):
    """A model call failed (server unreachable, rejected request, server error).

    The message says what to check: the base URL, the API key or the model name.
    """

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        """The HTTP status the model server answered with; None if it was never reached."""


class ScenarioError(PlancastError):
    """A scripted-model scenario file or object is invalid; the message names the field."""


class StructuredOutputUnsupported(ModelConfigError):
    """The model's server refused the structured-output constraint we sent (HTTP 400/500
    naming ``response_format``, ``grammar`` ...): the preset's ``structured`` setting does
    not match the server. Retrying cannot help; the message names the setting to change."""
