"""JSON encoding and decoding of wire messages, with decoders built once per type set."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import msgspec

from ._base import Message

_encoder = msgspec.json.Encoder()


def encode(message: Message) -> bytes:
    """Encode a message as JSON bytes (the ``type`` tag and schema version included)."""
    return _encoder.encode(message)


@lru_cache(maxsize=128)
def decoder_for(message_type: Any) -> msgspec.json.Decoder[Any]:
    """A JSON decoder for one message type or a union of them, cached per type."""
    return msgspec.json.Decoder(message_type)


UNREADABLE = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)
"""What decoding input from outside can raise: not JSON, not the schema, invalid UTF-8,
nested deeper than msgspec follows (it stops before any stack is at risk)."""


def decode(data: bytes | str, message_type: Any) -> Any:
    """Decode JSON into ``message_type``; raises ``msgspec.ValidationError`` or ``DecodeError``."""
    return decoder_for(message_type).decode(data)
