"""A GBNF reader for tests: parse grammar text back, match strings, draw strings from it.

It reads the text our grammars are sent as (not the objects they were built from), so a
rendering mistake shows up here as it would on a server; it knows the subset of GBNF we
write: literals, character classes, rule names, groups, ``|``, ``?``, ``*``, ``+``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import cache

from hypothesis import strategies as st

from runtime.models import Alt, Chars, Expr, Lit, Ref, Rep, Seq, render

_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]"}
_HEX = {"x": 2, "u": 4, "U": 8}


class GbnfSyntaxError(ValueError):
    pass


@dataclass
class Rules:
    """A parsed grammar."""

    rules: dict[str, Expr]

    @property
    def names(self) -> set[str]:
        return set(self.rules)

    def text(self, name: str) -> str:
        """The rule's body rendered again (parsing then rendering is the identity)."""
        return render(self.rules[name])

    def literals(self, name: str) -> list[str]:
        """The alternatives of a rule that is a choice of literals."""
        expr = self.rules[name]
        items = expr.items if isinstance(expr, Alt) else (expr,)
        return [i.text for i in items if isinstance(i, Lit)]

    def matches(self, text: str, start: str = "root") -> bool:
        """Whether ``text`` is in the language of rule ``start``."""
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 20_000))
        try:
            return len(text) in _Matcher(self.rules, text).ends(Ref(start), 0)
        finally:
            sys.setrecursionlimit(limit)

    def draw(self, data: st.DataObject, start: str = "root", max_depth: int = 12) -> str:
        """A string of the language (bounded repetition and recursion), drawn with ``data``."""
        return _draw(self.rules, Ref(start), data, 0, max_depth)


def parse_gbnf(text: str) -> Rules:
    rules: dict[str, Expr] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, body = line.partition(" ::= ")
        if not sep or not name.replace("-", "").isalnum() or name != name.lower():
            raise GbnfSyntaxError(f"line {number}: not `name ::= body`: {line!r}")
        if name in rules:
            raise GbnfSyntaxError(f"line {number}: rule {name} defined twice")
        parser = _Parser(body)
        rules[name] = parser.alternatives()
        if parser.pos != len(body):
            raise GbnfSyntaxError(f"line {number}: unparsed rest {body[parser.pos:]!r}")
    undefined = {r for e in rules.values() for r in _refs(e)} - rules.keys()
    if undefined or "root" not in rules:
        raise GbnfSyntaxError(f"undefined rules {sorted(undefined)} (or no root)")
    return Rules(rules)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text, self.pos = text, 0

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def spaces(self) -> None:
        while self.peek() == " ":
            self.pos += 1

    def alternatives(self) -> Expr:
        items = [self.sequence()]
        while self.peek() == "|":
            self.pos += 1
            items.append(self.sequence())
        return items[0] if len(items) == 1 else Alt(tuple(items))

    def sequence(self) -> Expr:
        items: list[Expr] = []
        self.spaces()
        while self.peek() not in ("", "|", ")"):
            items.append(self.postfix(self.atom()))
            self.spaces()
        if not items:
            return Lit("")
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def postfix(self, atom: Expr) -> Expr:
        mark = self.peek()
        if mark in ("?", "*", "+"):
            self.pos += 1
            return Rep(atom, max=1) if mark == "?" else Rep(atom, min=int(mark == "+"))
        if mark == "{":
            end = self.text.index("}", self.pos)
            low, comma, high = self.text[self.pos + 1:end].partition(",")
            self.pos = end + 1
            top = (int(high) if high else None) if comma else int(low)
            return Rep(atom, min=int(low), max=top)
        return atom

    def atom(self) -> Expr:
        c = self.peek()
        if c == '"':
            self.pos += 1
            out = []
            while self.peek() != '"':
                if not self.peek():
                    raise GbnfSyntaxError("unterminated literal")
                out.append(self.char())
            self.pos += 1
            return Lit("".join(out))
        if c == "[":
            self.pos += 1
            negate = self.peek() == "^"
            self.pos += negate
            ranges = []
            while self.peek() != "]":
                lo = self.char()
                hi = lo
                if self.peek() == "-" and self.text[self.pos + 1:self.pos + 2] != "]":
                    self.pos += 1
                    hi = self.char()
                ranges.append((ord(lo), ord(hi)))
            self.pos += 1
            return Chars(tuple(ranges), negate)
        if c == "(":
            self.pos += 1
            inner = self.alternatives()
            if self.peek() != ")":
                raise GbnfSyntaxError(f"expected ) at {self.pos}")
            self.pos += 1
            return inner
        start = self.pos
        while self.peek() and (self.peek().isalnum() or self.peek() == "-"):
            self.pos += 1
        if start == self.pos:
            raise GbnfSyntaxError(f"unexpected {c!r} at {self.pos} in {self.text!r}")
        return Ref(self.text[start:self.pos])

    def char(self) -> str:
        c = self.peek()
        if c != "\\":
            self.pos += 1
            return c
        kind = self.text[self.pos + 1]
        if kind in _HEX:
            digits = self.text[self.pos + 2:self.pos + 2 + _HEX[kind]]
            self.pos += 2 + _HEX[kind]
            return chr(int(digits, 16))
        if kind not in _ESCAPES:  # llama.cpp refuses unknown escapes
            raise GbnfSyntaxError(f"unknown escape \\{kind}")
        self.pos += 2
        return _ESCAPES[kind]


def _refs(expr: Expr) -> set[str]:
    match expr:
        case Ref(name):
            return {name}
        case Seq(items) | Alt(items):
            return set().union(*(_refs(i) for i in items))
        case Rep(item):
            return _refs(item)
    return set()


def _in_class(chars: Chars, c: str) -> bool:
    inside = any(lo <= ord(c) <= hi for lo, hi in chars.ranges)
    return inside != chars.negate


class _Matcher:
    def __init__(self, rules: dict[str, Expr], text: str) -> None:
        self.rules, self.text = rules, text
        self.ends = cache(self._ends)  # type: ignore[method-assign]

    def _ends(self, expr: Expr, pos: int) -> frozenset[int]:
        text = self.text
        match expr:
            case Lit(value):
                return frozenset([pos + len(value)]) if text.startswith(value, pos) \
                    else frozenset()
            case Chars():
                return frozenset([pos + 1]) if pos < len(text) and _in_class(expr, text[pos]) \
                    else frozenset()
            case Ref(name):
                return self.ends(self.rules[name], pos)
            case Seq(items):
                current = frozenset([pos])
                for item in items:
                    current = frozenset().union(*(self.ends(item, p) for p in current))
                return current
            case Alt(items):
                return frozenset().union(*(self.ends(i, pos) for i in items))
            case Rep(item, low, high):
                found = {pos} if low == 0 else set()
                frontier, count = {pos}, 0
                while frontier and (high is None or count < high):
                    frontier = set().union(*(self.ends(item, p) for p in frontier))
                    count += 1
                    if count >= low:
                        if high is None:
                            frontier -= found  # seen at some count past low: nothing new
                        found |= frontier
                return frozenset(found)
        raise TypeError(expr)


_POOL = [*'$${}0123456789"\\ az\n\t\u00a0\u2003\u3000é{}[],:', "\U0001F600"]


def _draw(rules: dict[str, Expr], expr: Expr, data: st.DataObject, depth: int,
          max_depth: int) -> str:
    deep = depth >= max_depth
    match expr:
        case Lit(value):
            return value
        case Chars():
            candidates = [c for c in _POOL if _in_class(expr, c)]
            if not expr.negate:
                candidates += [chr(c) for pair in expr.ranges for c in pair]
            return data.draw(st.sampled_from(sorted(set(candidates))))
        case Ref(name):
            return _draw(rules, rules[name], data, depth + 1, max_depth)
        case Seq(items):
            return "".join(_draw(rules, i, data, depth, max_depth) for i in items)
        case Alt(items):
            index = 0 if deep else data.draw(st.integers(0, len(items) - 1))
            return _draw(rules, items[index], data, depth, max_depth)
        case Rep(item, low, high):
            most = low if deep else low + 3
            count = data.draw(st.integers(low, most if high is None else min(high, most)))
            return "".join(_draw(rules, item, data, depth + 1, max_depth) for _ in range(count))
    raise TypeError(expr)
