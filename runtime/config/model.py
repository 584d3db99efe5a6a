"""Which model a role talks to and how (``[models.NAME]``): plain settings, so the team
file can be read and checked without importing the model client."""

from __future__ import annotations

import os
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from protocols import Usage

from .errors import ModelConfigError

Structured = Literal["off", "json_schema", "json_object_schema", "grammar", "vllm"]
"""The structured-output dialects a model's server may speak (see ``runtime.models``)."""
DIALECTS: tuple[str, ...] = get_args(Structured)
ROLE_HEADER = "x-plancast-role"
"""Request header naming the calling role; proxies and the scripted server route on it."""
SCRIPTED_NO_ANSWER = "no_rule_matched"
"""Error ``code`` of the scripted model's answer to a request its scenario has no rule for:
the model client makes it a setup error (asking again gets the same answer)."""

DEFAULT_BASE_URL = "https://api.openai.com/v1"
LOCAL_PLACEHOLDER_KEY = "plancast-local-no-key"
"""Sent to local servers (vLLM, Ollama, the scripted model) that need no key."""
_LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0"})


class ModelSettings(BaseModel):
    """Which model a role talks to and how; one per role, nothing implied."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    model: str = Field(min_length=1)
    """Model name as the server knows it (``gpt-4.1-mini``, ``qwen2.5:7b`` ...)."""
    name: str = ""
    """The preset's name (``[models.NAME]``), filled in by the team loader; for messages."""
    structured: Structured = "off"
    """The structured-output dialect its server speaks for plans, verdicts and decisions:
    ``off``, ``json_schema`` (OpenAI), ``json_object_schema`` and ``grammar`` (llama.cpp),
    ``vllm``; see :mod:`runtime.models.structured`."""
    base_url: str | None = None
    """OpenAI-compatible endpoint, ending in ``/v1``; None uses ``OPENAI_BASE_URL`` or OpenAI."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the API key (the key itself never sits in settings)."""
    temperature: float | None = None
    """Sampling temperature; None leaves the server's default."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Cap on completion tokens; None takes the role kind's default (see runtime.config.team)."""
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Extra JSON fields for servers with their own options (e.g. vLLM's ``top_k``)."""
    timeout: float = 120.0
    """Seconds to wait for a response (or the next streamed chunk)."""
    first_byte_timeout: float = Field(default=60.0, gt=0)
    """Seconds from sending a streamed request (a plan) to its first chunk (time to first
    token): a server that accepted the request and sends nothing is given up after this,
    not asked again with the same request; separate from ``timeout``."""
    max_retries: int = Field(default=2, ge=0)
    """Retries of connection errors, 408/409/429 and 5xx, with backoff (plancast's own, not
    the client's): a timeout and an error that names the request's shape (a refused
    structured-output dialect) are never retried."""
    prompt_price_per_mtok: float = 0.0
    """USD per million prompt tokens, for the cost in :class:`Usage`."""
    completion_price_per_mtok: float = 0.0
    """USD per million completion tokens."""

    def effective_base_url(self) -> str:
        """The URL calls go to: ``base_url``, else ``OPENAI_BASE_URL``, else OpenAI's."""
        return self.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL

    def is_local(self) -> bool:
        """Whether the endpoint is on this machine (where servers rarely want a key)."""
        return urlsplit(self.effective_base_url()).hostname in _LOCAL_HOSTS

    def api_key(self) -> str:
        """The key from ``api_key_env``; a placeholder for local servers; else an error."""
        key = os.environ.get(self.api_key_env)
        if key:
            return key
        if self.is_local():
            return LOCAL_PLACEHOLDER_KEY
        raise ModelConfigError(
            f"no API key for model {self.model!r} at {self.effective_base_url()}: "
            f"set the environment variable {self.api_key_env} (or api_key_env to the "
            "variable that holds it), or point base_url at a local server"
        )

    def usage(self, prompt_tokens: int, completion_tokens: int, *,
              estimated: bool = False) -> Usage:
        """Usage of one call, priced with this model's prices."""
        cost = (
            prompt_tokens * self.prompt_price_per_mtok
            + completion_tokens * self.completion_price_per_mtok
        ) / 1_000_000
        return Usage(
            calls=1,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=cost,
            estimated=estimated,
        )
