"""Which failed model requests are sent again, and after how long.

plancast retries itself (the openai client is made with ``max_retries=0``), so a request
whose error cannot change is sent once: a server that refuses the request's shape (a
structured-output dialect it does not speak) answers every retry the same way, and one
that accepted a request and sent nothing is not asked again within the same deadline.
What may pass on another try (a refused or dropped connection, 408/409/429, another 5xx)
is sent again, up to the preset's ``max_retries``, with the client's backoff.
"""

from __future__ import annotations

import random

import openai

from ..config import ModelConfigError

__all__ = ["Calls", "backoff", "retryable"]

INITIAL_DELAY, MAX_DELAY = 0.5, 8.0
"""Backoff bounds, as the openai client's."""
MAX_RETRY_AFTER = 60.0
"""A server's ``retry-after`` is honoured up to this many seconds."""
RETRY_STATUSES = frozenset({408, 409, 429})


class Calls:
    """Requests sent for one model call (each retry one more), so that a call that failed
    is counted in the usage as the calls it made."""

    def __init__(self) -> None:
        self.sent = 0


def retryable(exc: openai.OpenAIError, error: Exception) -> bool:
    """May the request that failed with ``exc`` (worded as ``error``) pass if sent again?"""
    if isinstance(error, ModelConfigError):  # a refused dialect, an unscripted request
        return False
    if isinstance(exc, openai.APITimeoutError):  # it took the request and did not answer
        return False
    if isinstance(exc, openai.APIConnectionError):
        return True
    if isinstance(exc, openai.APIStatusError):
        should = exc.response.headers.get("x-should-retry")
        if should in ("true", "false"):
            return should == "true"
        return exc.status_code in RETRY_STATUSES or exc.status_code >= 500
    return False  # an error sent mid-stream, a body that is not a completion


def backoff(retry: int, exc: openai.OpenAIError) -> float:
    """Seconds before retry number ``retry`` (0 first): the server's ``retry-after`` if it
    sent a short one, else exponential with jitter."""
    if isinstance(exc, openai.APIStatusError):
        try:
            after = float(exc.response.headers.get("retry-after", ""))
        except ValueError:
            after = -1.0
        if 0 <= after <= MAX_RETRY_AFTER:
            return after
    return min(INITIAL_DELAY * 2.0 ** retry, MAX_DELAY) * (1 - 0.25 * random.random())
