"""What goes wrong with a model, by name; each message says what to check."""

from __future__ import annotations

from protocols import Usage

from ..config import ModelConfigError
from ..errors import PlancastError


class ModelError(PlancastError):
    """A model call failed (server unreachable, rejected request, server error).

    The message says what to check: the base URL, the API key or the model name.
    """

    usage: Usage | None = None
    """The requests the failed call sent (set by the client): calls, tokens unknown."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        """The HTTP status the model server answered with; None if it was never reached."""


class StructuredOutputUnsupported(ModelConfigError):
    """The model's server refused the structured-output constraint we sent (HTTP 400/500
    naming ``response_format``, ``grammar`` ...): the preset's ``structured`` setting does
    not match the server. Retrying cannot help; the message names the setting to change."""

    usage: Usage | None = None
    """The requests the failed call sent (one: it is not sent again)."""


class ScenarioHasNoAnswer(ModelError, ModelConfigError):
    """The scripted model's scenario has no rule for a request. Asking again gets the same
    answer, so it is a setup error (the run fails naming the scenario and the request)
    rather than a failed step that a replan would meet again."""


class LocalModelMissing(PlancastError):
    """The ``local`` extra (or the model file) is not installed."""


class LocalModelStartError(PlancastError):
    """The server exited or did not answer in time; the message ends with its log."""


class GrammarTextError(PlancastError, ValueError):
    """A grammar text (a tool argument's ``x-gbnf``) we cannot read or embed; the message
    says where. The argument is then left unconstrained (its tool still checks it)."""
