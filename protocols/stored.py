"""A run's events as its events stream stores them: one event per message, or a batch of
consecutive ones (``event.batch``); every event decoded on its own, so one that a reader
does not know (from a newer deployment) or that is broken is skipped, not its neighbours."""

from __future__ import annotations

import logging
from typing import get_args

import msgspec

from .codec import UNREADABLE, decoder_for
from .events import EventBatch, EventMessage, RunEvent

log = logging.getLogger(__name__)

_EVENT = decoder_for(RunEvent)
_MESSAGE = decoder_for(EventMessage)
_KNOWN_TYPES = frozenset(t.__struct_config__.tag for t in get_args(RunEvent))


class _Peek(msgspec.Struct):
    """What a reader needs of an event it cannot decode in full."""

    type: str = ""
    seq: int = 0


def stored_events(data: bytes, run_id: str) -> list[tuple[int, RunEvent | None]]:
    """The events one stored message carries, in order, each with its number; None for one
    to skip (an unknown type, or broken: it still takes its number if that can be read)."""
    try:
        message = _MESSAGE.decode(data)
    except UNREADABLE:
        return [_one(data, run_id)]
    if isinstance(message, EventBatch):
        return [_one(raw, run_id) for raw in message.events]
    return [(message.seq, message)]


def readable_events(data: bytes, run_id: str) -> list[RunEvent]:
    """The events of one stored message that decode (the others are logged and skipped)."""
    return [event for _, event in stored_events(data, run_id) if event is not None]


def _one(data: bytes | msgspec.Raw, run_id: str) -> tuple[int, RunEvent | None]:
    try:
        event: RunEvent = _EVENT.decode(data)
        return event.seq, event
    except UNREADABLE as exc:
        try:
            peek = msgspec.json.decode(data, type=_Peek)
        except UNREADABLE:
            peek = _Peek()
        if peek.type and peek.type not in _KNOWN_TYPES:
            log.debug("run %s: skipping event %d of unknown type %r", run_id, peek.seq, peek.type)
        else:
            log.warning("run %s: skipping an event that does not decode (%s)", run_id, exc)
        return peek.seq, None
