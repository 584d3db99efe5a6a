"""What a failed model call means, in one line that says what to check.

Every openai exception becomes a :class:`ModelError` naming the model and
its server, or, when the server refused the request's structured-output constraint, the
:class:`StructuredOutputUnsupported` that names the setting to change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import openai

from ..config import SCRIPTED_NO_ANSWER
from .errors import ModelError, ScenarioHasNoAnswer, StructuredOutputUnsupported
from .structured import Constraint, refusal

if TYPE_CHECKING:
    from ..config import ModelSettings


def silent_server(settings: ModelSettings) -> ModelError:
    """A server that took a streamed request and sent nothing within ``first_byte_timeout``."""
    preset, table = (f"preset {settings.name!r}, ", f"[models.{settings.name}]") \
        if settings.name else ("", "the role's model table")
    return ModelError(
        f"the model server at {settings.effective_base_url()} ({preset}model "
        f"{settings.model!r}) accepted the request and sent nothing within "
        f"{settings.first_byte_timeout:g}s (first_byte_timeout); check that it is running "
        f"and not stuck, or raise first_byte_timeout under {table}")


def model_error(exc: openai.OpenAIError, settings: ModelSettings,
                constraint: Constraint | None = None,
                ) -> ModelError | StructuredOutputUnsupported:
    """Turn an openai exception into a ModelError that says what to check (or, when the
    server refused the request's constraint, the configuration error that names it)."""
    where = f"model {settings.model!r} at {settings.effective_base_url()}"
    if isinstance(exc, openai.APITimeoutError):
        return ModelError(
            f"{where} did not answer within {settings.timeout}s; "
            "raise the timeout or check the server's load"
        )
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc
        return ModelError(
            f"cannot reach the model server for {where} ({cause!r}); check base_url "
            "(or OPENAI_BASE_URL) and that the server is running"
        )
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        body = exc.body
        detail = body.get("message") if isinstance(body, dict) else None
        refused = refusal(status, f"{exc.message} {body}", settings, constraint,
                          shown=detail if isinstance(detail, str) else None)
        if refused is not None:
            return refused
        if exc.code == SCRIPTED_NO_ANSWER:
            return ScenarioHasNoAnswer(f"{where}: {detail or exc.message}", status_code=status)
        hints = {
            401: f"check the API key in ${settings.api_key_env}",
            403: f"the key in ${settings.api_key_env} may not have access to this model",
            404: "check the model name and base_url",
            429: "rate limited or out of quota; retry later",
        }
        hint = hints.get(status) or (
            "the model server failed; retry or check its logs"
            if status >= 500
            else "check the model name and the request"
        )
        return ModelError(
            f"{where} answered HTTP {status}: {detail or exc.message} ({hint})",
            status_code=status,
        )
    return ModelError(f"{where}: {exc}")
