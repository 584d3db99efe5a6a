"""Token counts without a tokenizer, for model calls whose server reported none.

Some servers send no usage in a stream (llama.cpp's, vLLM's unless asked), and a plan
rejected mid-stream is closed before any usage could arrive. Such a call still costs
tokens: it is counted with this estimate and the :class:`~protocols.Usage` says
``estimated``, rather than counting 0. BPE tokenizers make one token of most words up to
about six letters, split numbers into short groups of digits and merge short runs of
punctuation (JSON's ``{"`` and ``":``); the estimate follows that. Checked against
SmolLM2's tokenizer (llama.cpp's ``/extras/tokenize``) on the planner's prompts, the
built-in system prompts, JSON plan lines and prose: within 10% (``benchmarks.local_model``
repeats the check on each run's plans).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

_PIECE = re.compile(r"(?P<word>[A-Za-z]+)|(?P<digits>[0-9]+)|(?P<symbols>[^\sA-Za-z0-9]+)")
_CHARS = {"word": 6, "digits": 2, "symbols": 3}
"""Characters of each kind of run per token."""
MESSAGE_OVERHEAD = 4
"""Tokens a chat template adds around each message (role markers, separators)."""


def estimate_text(text: str) -> int:
    """Estimated tokens of ``text``: runs of letters, digits and symbols, each by its size."""
    total = 0
    for match in _PIECE.finditer(text):
        kind = match.lastgroup or "symbols"
        total += -(-len(match.group()) // _CHARS[kind])
    return total


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
