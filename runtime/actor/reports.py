"""What an actor says about a message it could not handle: the run's ``work.error``,
and the short, safe excerpts that go into ``actor.error`` reports and dead letters."""

from __future__ import annotations

import re
import traceback
from typing import Any

import msgspec

from protocols import (
    UNREADABLE,
    Message,
    ReviewTask,
    StepTask,
    SynthesisTask,
    Usage,
    WorkError,
)


def work_error(message: Message, *, actor: str, delivery: int, error: str,
               will_retry: bool, setup_error: bool = False,
               usage: Usage | None = None) -> WorkError | None:
    """The report to a run of a failure to handle one of its tasks (None: not run work)."""
    common: dict[str, Any] = {"actor": actor, "delivery": delivery, "error": error[:2000],
                              "will_retry": will_retry, "setup_error": setup_error,
                              "usage": usage or Usage()}
    match message:
        case StepTask() | ReviewTask() | SynthesisTask():
            common["nonce"] = message.nonce
    match message:
        case StepTask():
            return WorkError(run_id=message.run_id, work="step", step_id=message.step.id,
                             attempt=message.attempt, **common)
        case ReviewTask():
            return WorkError(run_id=message.run_id, work="review", step_id=message.step.id,
                             attempt=message.attempt, **common)
        case SynthesisTask():
            return WorkError(run_id=message.run_id, work="synthesis", **common)
    return None


def traceback_tail(exc: Exception) -> str:
    return "".join(traceback.format_exception(exc, limit=-4))[-2000:]


def tag_of(data: bytes) -> str:
    try:
        obj = msgspec.json.decode(data)
    except UNREADABLE:
        return "not JSON"
    if isinstance(obj, dict):
        return f"type {obj.get('type')!r}"
    return f"a JSON {type(obj).__name__}, not an object"


def header_safe(text: str) -> str:
    return re.sub(r"[\r\n]+", " ", text)[:512]
