"""A small model of GBNF grammars (llama.cpp's, also read by vLLM's xgrammar) and its text.

Grammars are built as expressions (:class:`Lit`, :class:`Chars`, :class:`Seq` ...) and
rendered to text in one place, so the escaping rules live here only: literals escape
``"``, ``\\`` and control characters; character classes write every non-alphanumeric
character as ``\\xXX``/``\\uXXXX`` (llama.cpp's parser knows no ``\\-`` or ``\\^``). Bounded
repetition ``{m,n}`` is written as such (llama.cpp's parser and xgrammar read it, and it
samples far faster than nested options).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Alt", "Chars", "Expr", "Grammar", "Lit", "Ref", "Rep", "Seq", "alt", "opt", "render",
           "seq"]


@dataclass(frozen=True)
class Lit:
    """Exactly this text."""

    text: str


@dataclass(frozen=True)
class Chars:
    """One character in (or, with ``negate``, not in) the inclusive code point ranges."""

    ranges: tuple[tuple[int, int], ...]
    negate: bool = False

    @classmethod
    def of(cls, spec: str, *, negate: bool = False,
           ranges: Iterable[tuple[int, int]] = ()) -> Chars:
        """``Chars.of("abc")``: any of these characters, plus extra ``ranges``."""
        return cls(tuple((ord(c), ord(c)) for c in spec) + tuple(ranges), negate)


@dataclass(frozen=True)
class Ref:
    """The rule of this name."""

    name: str


@dataclass(frozen=True)
class Seq:
    """These, one after the other."""

    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Alt:
    """One of these."""

    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Rep:
    """``item`` repeated ``min`` to ``max`` times (None: no upper bound)."""

    item: Expr
    min: int = 0
    max: int | None = None

    def __post_init__(self) -> None:
        if self.min < 0 or (self.max is not None and self.max < max(self.min, 1)):
            raise ValueError(f"bad repetition bounds {self.min}..{self.max}")


Expr = Lit | Chars | Ref | Seq | Alt | Rep


def seq(*items: Expr | str) -> Expr:
    """A sequence; strings are literals; adjacent literals are merged."""
    parts: list[Expr] = []
    for item in items:
        expr = Lit(item) if isinstance(item, str) else item
        if isinstance(expr, Lit) and parts and isinstance(parts[-1], Lit):
            parts[-1] = Lit(parts[-1].text + expr.text)
        elif not (isinstance(expr, Lit) and not expr.text):
            parts.append(expr)
    return parts[0] if len(parts) == 1 else Seq(tuple(parts))


def alt(*items: Expr | str) -> Expr:
    """A choice; strings are literals."""
    exprs = tuple(Lit(i) if isinstance(i, str) else i for i in items)
    if not exprs:
        raise ValueError("a choice needs at least one alternative")
    return exprs[0] if len(exprs) == 1 else Alt(exprs)


def opt(item: Expr | str) -> Expr:
    return Rep(Lit(item) if isinstance(item, str) else item, max=1)


class Grammar:
    """Named rules; ``root`` is where the output starts. Rule names are lower-case words
    joined by dashes, as llama.cpp requires."""

    def __init__(self) -> None:
        self.rules: dict[str, Expr] = {}

    def rule(self, name: str, expr: Expr) -> Ref:
        """Define (or redefine to the same) rule ``name``; a reference to it."""
        if not _valid_name(name):
            raise ValueError(f"bad GBNF rule name {name!r}: lower-case words and dashes")
        if self.rules.get(name, expr) != expr:
            raise ValueError(f"rule {name!r} defined twice, differently")
        self.rules[name] = expr
        return Ref(name)

    def render(self) -> str:
        """The grammar as GBNF text, ``root`` first."""
        if "root" not in self.rules:
            raise ValueError("a grammar needs a root rule")
        order = ["root", *sorted(n for n in self.rules if n != "root")]
        return "".join(f"{name} ::= {render(self.rules[name])}\n" for name in order)


def render(expr: Expr) -> str:
    """One expression as GBNF."""
    match expr:
        case Lit(text):
            return '"' + "".join(_lit_char(c) for c in text) + '"'
        case Chars(ranges, negate):
            body = "".join(_class_char(lo) if lo == hi else f"{_class_char(lo)}-{_class_char(hi)}"
                           for lo, hi in ranges)
            return f"[{'^' if negate else ''}{body}]"
        case Ref(name):
            return name
        case Seq(items):
            return " ".join(f"({render(i)})" if isinstance(i, Alt) else render(i)
                            for i in items)
        case Alt(items):
            return " | ".join(render(i) for i in items)
        case Rep(item, low, high):
            inner = render(item)
            if isinstance(item, Seq | Alt):
                inner = f"({inner})"
            return inner + _bounds(low, high)
    raise TypeError(f"not a grammar expression: {expr!r}")


def _bounds(low: int, high: int | None) -> str:
    match low, high:
        case 0, 1:
            return "?"
        case 0, None:
            return "*"
        case 1, None:
            return "+"
        case _, None:
            return f"{{{low},}}"
    return f"{{{low}}}" if low == high else f"{{{low},{high}}}"


def _lit_char(c: str) -> str:
    if c in '"\\':
        return "\\" + c
    if c == "\n":
        return "\\n"
    if ord(c) < 0x20 or ord(c) == 0x7F:
        return f"\\x{ord(c):02X}"
    return c


def _class_char(code: int) -> str:
    c = chr(code)
    if c.isascii() and c.isalnum():
        return c
    if code <= 0xFF:
        return f"\\x{code:02X}"
    if code <= 0xFFFF:
        return f"\\u{code:04X}"
    return f"\\U{code:08X}"


def _valid_name(name: str) -> bool:
    return bool(name) and all(c.isascii() and (c.islower() or c.isdigit() or c == "-")
                              for c in name) and name[0].isalpha()
