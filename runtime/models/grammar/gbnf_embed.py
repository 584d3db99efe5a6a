"""A grammar a tool declares for a string argument, placed inside one of our grammars.

A tool's argument schema may hold ``"x-gbnf": "<GBNF text>"`` beside ``"type":
"string"``: its ``root`` is what the string may hold (the text itself, before JSON
escaping). Where the argument may name earlier steps (a plan step's ``args``), a rule the
text uses but does not define, ``step-ref``, stands for a ``$N`` / ``${N}`` reference to
a step the plan line may name; where none may be named, the alternatives that need one
are left out. The rules are renamed apart (``xg<n>-<name>``, with the line's suffix for
those that lead to a reference), literals and character classes are escaped for a JSON
string, and ``"``, ``\\``, control characters and a bare ``$`` are never produced (a
grammar that needs them cannot be declared so: write a JSON Schema ``pattern`` instead).
"""

from __future__ import annotations

from functools import cache

import msgspec

from ...tools import GRAMMAR_KEY
from ..errors import GrammarTextError
from .gbnf import Alt, Chars, Expr, Grammar, Lit, Ref, Rep, Seq, alt, seq
from .gbnf_text import parse_gbnf

__all__ = ["GRAMMAR_KEY", "STEP_REF", "embed"]

STEP_REF = "step-ref"
"""The rule a declared grammar uses (and does not define) where a ``$N`` may stand."""

_NEVER = ((0, 0x1F), (0x22, 0x22), (0x24, 0x24), (0x5C, 0x5C))
"""Control characters, ``"``, ``$`` and ``\\``: not produced by a declared grammar."""


def embed(g: Grammar, text: str, suffix: str, ref: Expr | None) -> Ref:
    """The rule of a JSON string holding what ``text``'s ``root`` admits; ``ref`` is what
    a ``step-ref`` becomes here (None: no reference may be named). GrammarTextError if the
    text is no grammar we can embed."""
    rules, key = _checked(text)
    dead = _dead(rules, ref is None)
    if "root" in dead:
        raise GrammarTextError("the grammar's root needs a step reference where none may be named")
    refers = _leads_to_ref(rules)
    prefix = f"xg{key}"

    def name(rule: str) -> str:
        return f"{prefix}-{rule.lower()}" + (f"-{suffix}" if rule in refers else "")

    def convert(expr: Expr) -> Expr | None:
        match expr:
            case Lit(value):
                return Lit(msgspec.json.encode(value).decode()[1:-1])
            case Chars():
                return _json_chars(expr)
            case Ref(rule) if rule == STEP_REF:
                return ref
            case Ref(rule):
                return None if rule in dead else Ref(name(rule))
            case Seq(items):
                parts = [convert(i) for i in items]
                return None if any(p is None for p in parts) \
                    else seq(*(p for p in parts if p is not None))
            case Alt(items):
                options = [o for o in (convert(i) for i in items) if o is not None]
                return alt(*options) if options else None
            case Rep(item, low, high):
                inner = convert(item)
                if inner is None:
                    return Lit("") if low == 0 else None
                return Rep(inner, low, high)
        raise TypeError(f"not a grammar expression: {expr!r}")

    for rule, expr in rules.items():
        if rule in dead or name(rule) in g.rules:
            continue
        body = convert(expr)
        assert body is not None, "a rule that is not dead converts to something"
        g.rule(name(rule), body)
    return g.rule(f"{prefix}-str" + (f"-{suffix}" if "root" in refers else ""),
                  seq('"', Ref(name("root")), '"'))


_KEYS: dict[str, int] = {}


@cache
def _checked(text: str) -> tuple[dict[str, Expr], int]:
    """The rules of ``text``, checked, and a number that names them apart from others."""
    rules = parse_gbnf(text)
    if "root" not in rules:
        raise GrammarTextError("the grammar has no root rule")
    if STEP_REF in rules:
        raise GrammarTextError(f"{STEP_REF} is where a step reference goes: do not define it")
    for rule, expr in rules.items():
        for used in _refs(expr):
            if used != STEP_REF and used not in rules:
                raise GrammarTextError(f"rule {rule} uses {used}, which is not defined")
        for literal in _literals(expr):
            if "$" in literal:
                raise GrammarTextError(f"rule {rule}: a literal $ would read as a step "
                                    f"reference; use {STEP_REF}")
    return rules, _KEYS.setdefault(text, len(_KEYS))


def _json_chars(chars: Chars) -> Chars:
    """``chars`` without what a declared grammar never produces."""
    if chars.negate:
        return Chars(chars.ranges + _NEVER, negate=True)
    ranges: list[tuple[int, int]] = []
    for lo, hi in chars.ranges:
        pieces = [(lo, hi)]
        for never_lo, never_hi in _NEVER:
            pieces = [part for a, b in pieces for part in
                      ((a, min(b, never_lo - 1)), (max(a, never_hi + 1), b)) if part[0] <= part[1]]
        ranges += pieces
    if not ranges:
        raise GrammarTextError("a character class holds only characters a JSON string "
                            "argument cannot hold here")
    return Chars(tuple(ranges))


def _dead(rules: dict[str, Expr], no_refs: bool) -> set[str]:
    """Rules that match nothing once ``step-ref`` matches nothing (``no_refs``)."""
    if not no_refs:
        return set()
    dead: set[str] = set()
    changed = True
    while changed:
        changed = False
        for rule, expr in rules.items():
            if rule not in dead and not _alive(expr, dead | {STEP_REF}):
                dead.add(rule)
                changed = True
    return dead


def _alive(expr: Expr, dead: set[str]) -> bool:
    match expr:
        case Ref(rule):
            return rule not in dead
        case Seq(items):
            return all(_alive(i, dead) for i in items)
        case Alt(items):
            return any(_alive(i, dead) for i in items)
        case Rep(item, low):
            return low == 0 or _alive(item, dead)
    return True


def _leads_to_ref(rules: dict[str, Expr]) -> set[str]:
    """Rules from which a ``step-ref`` can be reached."""
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for rule, expr in rules.items():
            if rule not in found and _refs(expr) & (found | {STEP_REF}):
                found.add(rule)
                changed = True
    return found


def _refs(expr: Expr) -> set[str]:
    match expr:
        case Ref(name):
            return {name}
        case Seq(items) | Alt(items):
            return set().union(*(_refs(i) for i in items))
        case Rep(item):
            return _refs(item)
    return set()


def _literals(expr: Expr) -> list[str]:
    match expr:
        case Lit(value):
            return [value]
        case Seq(items) | Alt(items):
            return [t for i in items for t in _literals(i)]
        case Rep(item):
            return _literals(item)
    return []
