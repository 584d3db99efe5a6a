"""The JSON answers the critic and synthesizer ask for: their schema and a tolerant reader.

The schema, generated from these msgspec types, is sent in the dialect the model preset's
``structured`` setting names (see :mod:`runtime.models.structured`); either way the answer is
read tolerantly (code fences and chatter around the object are fine).
"""

from __future__ import annotations

import re
from typing import Any, Literal

import msgspec

from protocols import UNREADABLE


class VerdictAnswer(msgspec.Struct):
    """What the critic's model answers."""

    approved: bool
    critique: str


class DecisionAnswer(msgspec.Struct):
    """What the synthesizer's model answers."""

    action: Literal["finish", "replan"]
    answer: str = ""
    reason: str = ""


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def find_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in ``text`` (inside a code fence or bare), or None."""
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    for candidate in candidates:
        start = candidate.find("{")
        while start != -1:
            end = candidate.rfind("}")
            while end > start:
                try:
                    value = msgspec.json.decode(candidate[start:end + 1])
                except UNREADABLE:
                    end = candidate.rfind("}", start, end)
                    continue
                if isinstance(value, dict):
                    return value
                break
            start = candidate.find("{", start + 1)
    return None
