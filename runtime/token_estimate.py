"""Token counts without a tokenizer, for model calls whose server reported none.

Some servers send no usage in a stream (llama.cpp's, vLLM's unless asked), and a plan
rejected mid-stream is closed before any usage could arrive. Such a call still costs
tokens: it is counted with this estimate and the :class:`~protocols.Usage` says
``estimated``, rather than counting 0. BPE tokenizers split English into about one token
per short word, long words and numbers into pieces of about four characters, and runs of
punctuation (JSON's ``{"`` and ``":``) into pieces of about two; the estimate follows that,
within some tens of percent of a real tokenizer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

_WORD = re.compile(r"[A-Za-z]+|[0-9]+")
_SYMBOLS = re.compile(r"[^\sA-Za-z0-9]+")
MESSAGE_OVERHEAD = 4
"""Tokens a chat template adds around each message (role markers, separators)."""


def estimate_text(text: str) -> int:
    """Estimated tokens of ``text``: words and digit runs by ~4 characters, symbols by ~2."""
    return sum(_pieces(w, 4) for w in _WORD.findall(text)) + sum(
        _pieces(s, 2) for s in _SYMBOLS.findall(text))


def _pieces(run: str, size: int) -> int:
    return -(-len(run) // size)


def estimate_messages(messages: Iterable[Mapping[str, Any]]) -> int:
    """Estimated prompt tokens of chat messages, with each message's template overhead."""
    total = 0
    for message in messages:
        total += MESSAGE_OVERHEAD + estimate_text(_content(message.get("content")))
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            total += estimate_text(str(function.get("name", "")))
            total += estimate_text(str(function.get("arguments", "")))
    return total


def _content(content: object) -> str:
    """A message's text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""
