"""GBNF text read into grammar expressions, so a grammar a tool declares for an argument
(``x-gbnf`` in its schema) can be embedded in the grammars we build: renamed, escaped for
a JSON string, its ``$N`` references bound to the ids a plan line may name.

It reads what llama.cpp's parser reads, as far as tool authors write it: rules
``name ::= body`` (over several lines), ``#`` comments, literals, character classes
(``^`` negation, ranges, ``\\xXX``/``\\uXXXX`` escapes), ``.``, groups, ``|`` and the
repetitions ``? * + {m} {m,} {m,n}``.
"""

from __future__ import annotations

import re

from ..errors import GrammarTextError
from .gbnf import Alt, Chars, Expr, Lit, Ref, Rep, Seq

__all__ = ["parse_gbnf"]

_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]",
            "-": "-", "^": "^"}
_HEX = {"x": 2, "u": 4, "U": 8}
_NAME = re.compile(r"[a-zA-Z][a-zA-Z0-9-]*")
_RULE_START = re.compile(r"[a-zA-Z][a-zA-Z0-9-]*\s*::=")


def parse_gbnf(text: str) -> dict[str, Expr]:
    """The rules of ``text`` by name (as written); GrammarTextError if it is not GBNF."""
    return _Reader(text).rules()


class _Reader:
    def __init__(self, text: str) -> None:
        self.text, self.pos = text, 0

    def fail(self, what: str) -> GrammarTextError:
        line = self.text.count("\n", 0, self.pos) + 1
        return GrammarTextError(f"line {line}: {what}")

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def skip(self) -> None:
        """Past spaces, newlines and comments."""
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c == "#":
                end = self.text.find("\n", self.pos)
                self.pos = len(self.text) if end < 0 else end
            elif c.isspace():
                self.pos += 1
            else:
                return

    def rules(self) -> dict[str, Expr]:
        rules: dict[str, Expr] = {}
        self.skip()
        while self.pos < len(self.text):
            match = _NAME.match(self.text, self.pos)
            if match is None:
                raise self.fail(f"expected a rule name at {self.text[self.pos:self.pos + 20]!r}")
            name = match[0]
            self.pos = match.end()
            self.skip()
            if not self.text.startswith("::=", self.pos):
                raise self.fail(f"expected ::= after {name}")
            self.pos += 3
            if name in rules:
                raise self.fail(f"rule {name} defined twice")
            rules[name] = self.alternatives()
            self.skip()
        if not rules:
            raise self.fail("no rules")
        return rules

    def at_end_of_sequence(self) -> bool:
        self.skip()
        c = self.peek()
        return c in ("", "|", ")") or _RULE_START.match(self.text, self.pos) is not None

    def alternatives(self) -> Expr:
        items = [self.sequence()]
        while self.peek() == "|":
            self.pos += 1
            items.append(self.sequence())
        return items[0] if len(items) == 1 else Alt(tuple(items))

    def sequence(self) -> Expr:
        items: list[Expr] = []
        while not self.at_end_of_sequence():
            items.append(self.postfix(self.atom()))
        if not items:
            return Lit("")
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def postfix(self, atom: Expr) -> Expr:
        while True:
            mark = self.peek()
            if mark in ("?", "*", "+"):
                self.pos += 1
                atom = Rep(atom, max=1) if mark == "?" else Rep(atom, min=int(mark == "+"))
            elif mark == "{":
                end = self.text.find("}", self.pos)
                bounds = self.text[self.pos + 1:end] if end > 0 else ""
                found = re.fullmatch(r"\s*(\d+)\s*(?:(,)\s*(\d*)\s*)?", bounds)
                if found is None:
                    raise self.fail(f"bad repetition {{{bounds}}}")
                low = int(found[1])
                high = (int(found[3]) if found[3] else None) if found[2] else low
                self.pos = end + 1
                try:
                    atom = Rep(atom, min=low, max=high)
                except ValueError as exc:
                    raise self.fail(str(exc)) from None
            else:
                return atom

    def atom(self) -> Expr:
        c = self.peek()
        if c == '"':
            self.pos += 1
            out = []
            while self.peek() != '"':
                if self.peek() in ("", "\n"):
                    raise self.fail("unterminated literal")
                out.append(self.char())
            self.pos += 1
            return Lit("".join(out))
        if c == "[":
            return self.char_class()
        if c == ".":
            self.pos += 1
            return Chars((), negate=True)
        if c == "(":
            self.pos += 1
            inner = self.alternatives()
            self.skip()
            if self.peek() != ")":
                raise self.fail("expected )")
            self.pos += 1
            return inner
        match = _NAME.match(self.text, self.pos)
        if match is None:
            raise self.fail(f"unexpected {c!r}")
        self.pos = match.end()
        return Ref(match[0])

    def char_class(self) -> Chars:
        self.pos += 1
        negate = self.peek() == "^"
        self.pos += negate
        ranges = []
        while self.peek() != "]":
            if self.peek() in ("", "\n"):
                raise self.fail("unterminated character class")
            lo = hi = self.char()
            if self.peek() == "-" and self.text[self.pos + 1:self.pos + 2] not in ("]", ""):
                self.pos += 1
                hi = self.char()
            if ord(hi) < ord(lo):
                raise self.fail(f"empty range {lo!r}-{hi!r}")
            ranges.append((ord(lo), ord(hi)))
        self.pos += 1
        return Chars(tuple(ranges), negate)

    def char(self) -> str:
        c = self.peek()
        if c != "\\":
            self.pos += 1
            return c
        kind = self.text[self.pos + 1:self.pos + 2]
        if kind in _HEX:
            digits = self.text[self.pos + 2:self.pos + 2 + _HEX[kind]]
            if not re.fullmatch(r"[0-9a-fA-F]+", digits) or len(digits) != _HEX[kind]:
                raise self.fail(f"bad escape \\{kind}{digits}")
            self.pos += 2 + _HEX[kind]
            return chr(int(digits, 16))
        if kind not in _ESCAPES:
            raise self.fail(f"unknown escape \\{kind}")
        self.pos += 2
        return _ESCAPES[kind]
