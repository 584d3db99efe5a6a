"""Reading the JSON object a model was asked to answer with, tolerating fences and chatter."""

from __future__ import annotations

import re
from typing import Any

import msgspec

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
                except msgspec.DecodeError:
                    end = candidate.rfind("}", start, end)
                    continue
                if isinstance(value, dict):
                    return value
                break
            start = candidate.find("{", start + 1)
    return None
