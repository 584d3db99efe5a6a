"""Publishes the server refuses for this connection's user.

A server that refuses a publish (the user's permissions do not allow the subject) drops
it and says so only to the connection, as an ``-ERR``, which nats-py hands to its error
callback. A request sent there would wait for an answer that never comes; here whoever
waits learns at once, and can name the user and the subject.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import anyio

_VIOLATION = re.compile(r"permissions violation for publish to \"?([^\"'\s]+)", re.IGNORECASE)


class Refusals:
    """The publishes being waited on, by subject; the error callback reports refusals."""

    def __init__(self, user: str = "") -> None:
        self.user = user
        """The connection's NATS user, when it has a name (user and password)."""
        self._waiting: dict[str, set[anyio.CancelScope]] = {}

    def who(self) -> str:
        return f"NATS user {self.user!r}" if self.user else "this connection's NATS user"

    @contextmanager
    def watching(self, subject: str) -> Iterator[anyio.CancelScope]:
        """A cancel scope around the block that the server's refusal of a publish to
        ``subject`` cancels: check its ``cancelled_caught`` after the block."""
        key = subject.lower()  # nats-py lower-cases the server's error text
        with anyio.CancelScope() as scope:
            self._waiting.setdefault(key, set()).add(scope)
            try:
                yield scope
            finally:
                waiting = self._waiting[key]
                waiting.discard(scope)
                if not waiting:
                    del self._waiting[key]

    def note(self, error: Exception) -> bool:
        """Hand a refusal the server reported to whoever waits on its subject; True if
        someone did (they will say it), False for any other error or nobody waiting."""
        found = _VIOLATION.search(str(error))
        waiting = self._waiting.get(found.group(1).lower(), set()) if found else set()
        for scope in waiting:
            scope.cancel()
        return bool(waiting)
