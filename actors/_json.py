"""The JSON answers the critic and synthesizer ask for: their schema and a tolerant reader.

With the role option ``structured_output = true`` the schema, generated from these
msgspec types, is sent as ``response_format`` to servers that support it; either way
the answer is read tolerantly (code fences and chatter around the object are fine).
"""

from __future__ import annotations

import re
from typing import Any, Literal

import msgspec

from protocols.codec import UNREADABLE


class VerdictAnswer(msgspec.Struct):
    """What the critic's model answers."""

    approved: bool
    critique: str


class DecisionAnswer(msgspec.Struct):
    """What the synthesizer's model answers."""

    action: Literal["finish", "replan"]
    answer: str = ""
    reason: str = ""


def response_format(answer_type: type[msgspec.Struct], enabled: bool) -> dict[str, Any] | None:
    """The structured-output request for ``answer_type``, or None when the role has it off."""
    if not enabled:
        return None
    return {"type": "json_schema", "json_schema": {
        "name": answer_type.__name__, "schema": msgspec.json.schema(answer_type)}}


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
