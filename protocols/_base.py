"""The base every wire message inherits: frozen, tagged, versioned JSON."""

from __future__ import annotations

import msgspec

SCHEMA_VERSION = 1
"""Bumped only for a change that old readers cannot ignore (see docs/schema-evolution.md)."""


class Message(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """A message on the bus. Subclasses set ``tag=`` to a dotted lower-case name."""

    schema_version: int = SCHEMA_VERSION
    """The wire-format version the sender wrote; readers accept any version they can decode."""


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Tokens and money spent by model calls; adds up per step and per run."""

    calls: int = 0
    """Model calls made."""
    prompt_tokens: int = 0
    """Input tokens, as reported by the model server."""
    completion_tokens: int = 0
    """Output tokens, as reported by the model server."""
    cost_usd: float = 0.0
    """Cost, when prices are configured for the model; 0 otherwise."""
    estimated: bool = False
    """Some of these tokens were counted here, by a tokenizer-free estimate, because the
    server reported none for a call (a stream without usage, a plan cut off mid-stream):
    close to, but not, the server's own count."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            calls=self.calls + other.calls,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cost_usd=self.cost_usd + other.cost_usd,
            estimated=self.estimated or other.estimated,
        )

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class ObjectRef(msgspec.Struct, frozen=True, kw_only=True):
    """A pointer to a payload kept in the JetStream object store (too large for a message)."""

    bucket: str
    """Object store bucket name."""
    name: str
    """Object name inside the bucket."""
    size: int
    """Size in bytes."""
    sha256: str = ""
    """Hex digest of the content, so a reader can check what it fetched."""
