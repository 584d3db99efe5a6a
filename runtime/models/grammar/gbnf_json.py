"""JSON in GBNF: strings, numbers, and values shaped by a JSON Schema (the subset tools use).

Strings inside a plan step's ``args`` are special: ``$N`` / ``${N}`` there make step N a
dependency, so :meth:`JsonRules.ref_string` builds a string rule that admits a reference
only to the ids it is given (a ``$`` followed by anything else is not a reference). The
schema conversion covers what msgspec and tool authors write (objects with properties and
``required``, arrays, ``anyOf``, ``enum``, ``const``, ``$ref`` into ``$defs``, scalar types,
a string's ``maxLength``, and a grammar a tool declares for a string (``x-gbnf``,
:mod:`.gbnf_embed`)); anything else
becomes any JSON value, and the tool checks its arguments before it runs.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from ...dag import references
from ..errors import GrammarTextError
from .gbnf import Chars, Expr, Grammar, Lit, Ref, Rep, alt, opt, seq
from .gbnf_embed import GRAMMAR_KEY, embed

__all__ = ["JsonRules"]

log = logging.getLogger(__name__)

_WS = "\u1680\u2028\u2029\u202f\u205f\u3000"
"""Unicode whitespace above Latin-1 (with U+2000..U+200A): ``str.strip`` removes it."""


class JsonRules:
    """The JSON rules of one grammar: generic pieces, reference-aware strings, schemas."""

    def __init__(self, grammar: Grammar) -> None:
        self.g = g = grammar
        self.sp = g.rule("sp", opt(" "))
        hexd = g.rule("hex", Chars.of("", ranges=[(48, 57), (97, 102), (65, 70)]))
        uesc = g.rule("uesc", seq("u", alt(  # never \u0024 ("$"), never a lone surrogate
            seq(_cls("1-9a-cA-CefEF"), hexd, hexd, hexd), seq(_cls("dD"), _cls("0-7"), hexd, hexd),
            seq("0", _cls("1-9a-fA-F"), hexd, hexd), seq("00", _cls("013-9a-fA-F"), hexd),
            seq("002", _cls("0-35-9a-fA-F")))))
        self.esc = g.rule("esc", seq("\\", alt(Chars.of('"\\/bfnrt'), uesc)))
        self._gchar = gchar = g.rule("gchar", alt(Chars.of('"\\', negate=True,
                                                           ranges=[(0, 0x1F)]), self.esc))
        self.string = g.rule("gstr", seq('"', Rep(gchar), '"'))
        self._nonblank = Chars.of('"\\' + _WS, negate=True,
                                  ranges=[(0, 0x20), (0x7F, 0xA0), (0x2000, 0x200A)])
        self.nat = g.rule("nat", alt("0", seq(_cls("1-9"), Rep(_cls("0-9")))))
        self.int = g.rule("int", seq(opt("-"), self.nat))
        # Bounded digits, as llama.cpp's own JSON grammar has them: "1e999" is no float.
        whole = alt("0", seq(_cls("1-9"), Rep(_cls("0-9"), 0, 15)))
        self.num = g.rule("num", seq(opt("-"), whole, opt(seq(".", Rep(_cls("0-9"), 1, 16))),
                                     opt(seq(_cls("eE"), opt(_cls("-+")), Rep(_cls("0-9"), 1, 2)))))
        self.bool = g.rule("bool", alt("true", "false"))
        self._plain = g.rule("plain", Chars.of('"\\$', negate=True, ranges=[(0, 0x1F)]))
        self._follow = g.rule("follow", Chars.of('"\\${', negate=True,
                                                 ranges=[(0, 0x1F), (48, 57)]))
        self._allowed: dict[str, frozenset[int]] = {}
        self._ids: dict[str, Ref | None] = {}
        self._limits: dict[str, int | None] = {}

    def short_string(self, most: int) -> Ref:
        """``gstr-<most>``: a JSON string of at most ``most`` characters (or escapes)."""
        return self.g.rule(f"gstr-{most}", seq('"', Rep(self._gchar, 0, most), '"'))

    def text(self, most: int) -> Ref:
        """``text-<most>``: a JSON string that starts with a visible character (so it is
        not blank), of at most ``most`` characters."""
        return self.g.rule(f"text-{most}", seq('"', self._nonblank,
                                               Rep(self._gchar, 0, most - 1), '"'))

    def ref_string(self, suffix: str, ids: Ref | None, allowed: Iterable[int],
                   most: int | None = None) -> Ref:
        """``str-<suffix>``: a JSON string whose ``$N`` references name only ``ids``
        (the rule listing ``allowed``, the ids themselves), of at most ``most`` pieces
        (characters, escapes, references)."""
        g = self.g
        self._allowed[suffix] = frozenset(allowed)
        self._ids[suffix] = ids
        self._limits[suffix] = most
        if ids is None:
            dollar: Expr = Lit("$")
            unit = alt(self._plain, self.esc, seq("$", self._follow))
        else:
            dollar = g.rule(f"dollar-{suffix}", alt(seq("$", ids), "$"))
            unit = alt(self._plain, self.esc, seq(dollar, self._follow), seq("${", ids, "}"))
        unit_rule = g.rule(f"unit-{suffix}", unit)
        return g.rule(f"str-{suffix}", seq('"', Rep(unit_rule, 0, most), opt(dollar), '"'))

    def any_value(self, suffix: str, string: Ref) -> Ref:
        """``val-<suffix>``: any JSON value, its strings built by ``string``."""
        name = f"val-{suffix}"
        if name in self.g.rules:
            return Ref(name)
        val = Ref(name)
        sp = self.sp
        member = seq(self.string, ":", sp, val)
        obj = self.g.rule(f"obj-{suffix}", seq("{", opt(seq(member, Rep(seq(",", sp, member)))),
                                               "}"))
        arr = self.g.rule(f"arr-{suffix}", seq("[", opt(seq(val, Rep(seq(",", sp, val)))), "]"))
        return self.g.rule(name, alt(string, self.num, self.bool, "null", obj, arr))

    def value(self, schema: Any, suffix: str, string: Ref,
              defs: Mapping[str, Any] | None = None) -> Expr:
        """The JSON values ``schema`` admits (a subset where it says more than we check)."""
        if not isinstance(schema, dict):
            return self.any_value(suffix, string)
        defs = {**(defs or {}), **schema.get("$defs", {})}
        if "$ref" in schema:
            return self._ref(schema["$ref"], suffix, string, defs)
        if "const" in schema or "enum" in schema:
            values = [schema["const"]] if "const" in schema else list(schema["enum"])
            ok = [v for v in values if self._literal_ok(v, suffix)]
            return alt(*(Lit(msgspec.json.encode(v).decode()) for v in ok)) if ok \
                else self.any_value(suffix, string)
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return alt(*(self.value(s, suffix, string, defs) for s in schema[key]))
        kind = schema.get("type")
        if isinstance(kind, list):
            return alt(*(self.value({**schema, "type": k}, suffix, string, defs) for k in kind))
        return self._typed(kind, schema, suffix, string, defs)

    def _typed(self, kind: Any, schema: dict[str, Any], suffix: str, string: Ref,
               defs: Mapping[str, Any]) -> Expr:
        match kind:
            case "string" if isinstance(schema.get(GRAMMAR_KEY), str):
                return self._declared(schema[GRAMMAR_KEY], suffix, string)
            case "string" if isinstance(schema.get("maxLength"), int):
                return self._at_most(max(schema["maxLength"], 0), suffix, string)
            case "string":
                return string
            case "integer":
                nonneg = schema.get("minimum", -1) >= 0 or schema.get("exclusiveMinimum", -1) >= 0
                return self.nat if nonneg else self.int
            case "number":
                return self.num
            case "boolean":
                return self.bool
            case "null":
                return Lit("null")
            case "array":
                item = self.value(schema.get("items", {}), suffix, string, defs)
                more = Rep(seq(",", self.sp, item))
                items = seq(item, more)
                return seq("[", items if schema.get("minItems", 0) >= 1 else opt(items), "]")
            case "object" if schema.get("properties"):
                return self._object(schema, suffix, string, defs)
        return self.any_value(suffix, string)

    def _object(self, schema: dict[str, Any], suffix: str, string: Ref,
                defs: Mapping[str, Any]) -> Expr:
        """Properties in the schema's order; the optional ones may be left out."""
        required = set(schema.get("required", ()))
        props = [(seq(msgspec.json.encode(key).decode(), ":", self.sp,
                      self.value(sub, suffix, string, defs)), key in required)
                 for key, sub in schema["properties"].items()]

        def rest(start: int) -> Expr:
            parts = [seq(",", self.sp, kv) if req else opt(seq(",", self.sp, kv))
                     for kv, req in props[start:]]
            return seq(*parts) if parts else Lit("")

        firsts: list[Expr] = []
        for index, (kv, req) in enumerate(props):
            firsts.append(seq(kv, rest(index + 1)))
            if req:
                break
        body = alt(*firsts)
        return seq("{", body if required else opt(body), "}")

    def _at_most(self, most: int, suffix: str, string: Ref) -> Expr:
        """A string of at most ``most`` pieces (a character, an escape, a ``$N`` reference
        with the character after it), reference-aware where ``string`` is."""
        if most == 0:
            return Lit('""')
        if suffix not in self._ids:
            return self.short_string(most)
        limit = self._limits.get(suffix)
        if limit is not None and limit <= most:
            return string  # the position's own bound is the tighter one
        ids = self._ids[suffix]
        dollar: Expr = Ref(f"dollar-{suffix}") if ids is not None else Lit("$")
        return self.g.rule(f"str-{suffix}-max{most}", seq(
            '"', Rep(Ref(f"unit-{suffix}"), 0, most - 1), opt(alt(Ref(f"unit-{suffix}"),
                                                                 dollar)), '"'))

    def _declared(self, text: str, suffix: str, string: Ref) -> Expr:
        """A string of the tool's own grammar, its ``step-ref`` the ids this position may
        name; a grammar we cannot read leaves the string free (the tool checks it)."""
        ids = self._ids.get(suffix)
        ref = alt(seq("$", ids), seq("${", ids, "}")) if ids is not None else None
        try:
            return embed(self.g, text, suffix, ref)
        except GrammarTextError as exc:
            log.warning("a tool's %s grammar is left out: %s", GRAMMAR_KEY, exc)
            return string

    def _ref(self, ref: str, suffix: str, string: Ref, defs: Mapping[str, Any]) -> Expr:
        name = ref.removeprefix("#/$defs/")
        if name not in defs:
            return self.any_value(suffix, string)
        rule = f"def-{_slug(name)}-{suffix}"
        if rule not in self.g.rules:
            self.g.rules[rule] = Lit("")  # a placeholder while a recursive definition builds
            self.g.rules[rule] = self.value(defs[name], suffix, string, defs)
        return Ref(rule)

    def _literal_ok(self, value: Any, suffix: str) -> bool:
        """A fixed value may hold ``$N`` only for ids the position may name (where strings
        are reference-aware: in a plan step's arguments)."""
        allowed = self._allowed.get(suffix)
        return allowed is None or set(references(value)) <= allowed


def _cls(spec: str) -> Chars:
    """A character class written as in a regex (``a-z0-9``)."""
    ranges = [(ord(m[1]), ord(m[2] or m[1])) for m in re.finditer(r"(.)(?:-(.))?", spec)]
    return Chars(tuple(ranges))


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "x"
