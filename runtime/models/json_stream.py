"""Each step object of a streamed ``{"steps": [...]}`` the moment its closing brace arrives.

A JSON-Schema dialect cannot ask for JSON Lines, so the plan comes as one object whose
``steps`` array holds the steps; streaming dispatch still needs every step as soon as it
is written. :class:`StepArrayReader` follows the text character by character (strings,
with their escapes and braces, are skipped correctly) and hands out the text of each
complete element of the first array it meets, inside the top-level object or bare.
"""

from __future__ import annotations

__all__ = ["StepArrayReader"]


class StepArrayReader:
    """Feed text as it streams; get back the elements of the steps array that completed."""

    def __init__(self) -> None:
        self._depth = 0
        """Open brackets and braces around the current character."""
        self._array_depth: int | None = None
        """The depth inside the steps array once it opened; None before."""
        self._closed = False
        self._in_string = False
        self._escaped = False
        self._item: list[str] | None = None
        """The element being read, once it started."""

    @property
    def done(self) -> bool:
        """Whether the steps array has closed."""
        return self._closed

    @property
    def started(self) -> bool:
        """Whether the steps array has opened."""
        return self._array_depth is not None

    def feed(self, text: str) -> list[str]:
        """The elements that ``text`` completed, in order."""
        complete: list[str] = []
        for char in text:
            if self._in_string:
                self._keep(char)
                self._string_char(char)
                continue
            at_level = self._at_element_level()
            if self._item is not None and at_level and char in ",]":
                complete.append("".join(self._item).strip())  # a scalar element ended
                self._item = None
            if char in "[{":
                self._start_if(at_level)
                self._keep(char)
                if self._array_depth is None and char == "[" and self._depth <= 1:
                    self._array_depth = self._depth + 1
                self._depth += 1
            elif char in "]}":
                self._keep(char)
                self._depth -= 1
                if self._array_depth is not None and not self._closed:
                    if self._depth < self._array_depth:
                        self._closed = True
                    elif self._depth == self._array_depth and self._item is not None:
                        complete.append("".join(self._item))
                        self._item = None
            else:
                self._in_string = char == '"'
                self._start_if(at_level and not char.isspace() and char != ",")
                self._keep(char)
        return complete

    def finish(self) -> list[str]:
        """What the text ended inside of (a cut-off element), for the scheduler to refuse."""
        item, self._item = self._item, None
        return ["".join(item).strip()] if item else []

    def _start_if(self, starts: bool) -> None:
        if starts and self._item is None:
            self._item = []

    def _keep(self, char: str) -> None:
        if self._item is not None:
            self._item.append(char)

    def _string_char(self, char: str) -> None:
        if self._escaped:
            self._escaped = False
        elif char == "\\":
            self._escaped = True
        elif char == '"':
            self._in_string = False

    def _at_element_level(self) -> bool:
        return not self._closed and self._array_depth is not None \
            and self._depth == self._array_depth
