"""``math``: arithmetic for models, evaluated by walking the AST (never ``eval``).

Only numbers, arithmetic operators, ``pi``/``e`` and a few functions are allowed, and
sizes are bounded before computing, so ``9**9**9`` is refused instead of hanging a worker.
The argument declares its grammar (:data:`EXPRESSION_GBNF`, ``x-gbnf`` in the schema) and
a ``pattern`` for servers that take a schema, so a constrained model can only write what
is evaluated here; what a model writes anyway is refused with a message that names the
piece and the fix (``^`` → ``**``), as a ToolInputError: the same expression would fail
the same way, so it is not retried but goes to the replan.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Annotated, Any

import msgspec

from ._base import GRAMMAR_KEY, StructTool
from .errors import ToolError, ToolInputError

Number = int | float

MAX_EXPRESSION_CHARS = 1000
MAX_INT_BITS = 10_000
"""Largest integer result (about 3000 digits); also bounds ``**`` before it is computed."""

MAX_ROUND_DIGITS = 4000
"""``round``'s ``ndigits`` beyond this is refused: ``round(1, -10**8)`` computes ``10**10**8``."""


def _round(value: Number, ndigits: Number | None = None) -> Number:
    if ndigits is not None and abs(ndigits) > MAX_ROUND_DIGITS:
        raise ToolError(f"round to at most {MAX_ROUND_DIGITS} digits either side of the point")
    return round(value, ndigits)  # type: ignore[arg-type]


_CONSTANTS: dict[str, Number] = {"pi": math.pi, "e": math.e}
_FUNCTIONS: dict[str, Callable[..., Number]] = {
    "abs": abs,
    "round": _round,
    "min": min,
    "max": max,
    "sqrt": math.sqrt,
    "log": math.log,
    "exp": math.exp,
    "sin": math.sin,
    "cos": math.cos,
}
_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}


_ONE_ARG = ("abs", "sqrt", "exp", "sin", "cos")
_ONE_OR_TWO = ("round", "log")
_TWO_OR_MORE = ("min", "max")
assert set(_ONE_ARG + _ONE_OR_TWO + _TWO_OR_MORE) == set(_FUNCTIONS)


def _choice(names: tuple[str, ...]) -> str:
    return " | ".join(f'"{n}"' for n in names)


EXPRESSION_GBNF = f"""
# What ``evaluate`` computes (Python's grammar, these operators, names and functions only).
# step-ref: a $N reference to an earlier step's output, where the plan allows one.
# Short by construction (8 terms of 8 factors, 12 digits): a small model that rambles
# inside an expression otherwise writes until its max_tokens and the plan is cut.
root   ::= sp sum sp
sum    ::= term (sp ("+" | "-") sp term){{0,7}}
term   ::= factor (sp ("*" | "/" | "//" | "%") sp factor){{0,7}}
factor ::= ("-" | "+")? sp power
power  ::= atom (sp "**" sp factor)?
atom   ::= number | const | call | "(" sp sum sp ")" | step-ref
number ::= int ("." [0-9]{{0,10}})? exp? | "." [0-9]{{1,10}} exp?
int    ::= "0" | [1-9] [0-9]{{0,11}}
exp    ::= [eE] [-+]? [0-9]{{1,2}}
const  ::= {_choice(tuple(_CONSTANTS))}
call   ::= ({_choice(_ONE_ARG)}) "(" sp sum sp ")"
         | ({_choice(_ONE_OR_TWO)}) "(" sp sum (sp "," sp sum)? sp ")"
         | ({_choice(_TWO_OR_MORE)}) "(" sp sum (sp "," sp sum){{1,3}} sp ")"
sp     ::= " "?
"""
"""The grammar of an expression (GBNF, over the string's text): every string it admits is
evaluated (or fails only on its values: division by zero, a result too large)."""

EXPRESSION_PATTERN = (
    r"^([0-9.eE+*/%(), -]|\$\{?[0-9]+\}?|"
    + "|".join(sorted((*_CONSTANTS, *_FUNCTIONS), key=len, reverse=True)) + ")+$")
"""The same, as far as a regular expression says it (for servers that take a schema):
only these characters, names and ``$N`` references (no ``(?:``: llama.cpp's schema
converter reads plain groups only)."""


class MathArgs(msgspec.Struct, forbid_unknown_fields=True):
    expression: Annotated[
        str,
        msgspec.Meta(
            description="An arithmetic expression, e.g. `2**10 / 3` or `sqrt(2) * pi`.",
            extra_json_schema={"pattern": EXPRESSION_PATTERN, GRAMMAR_KEY: EXPRESSION_GBNF}),
    ]


def evaluate(expression: str) -> Number:
    """The value of ``expression``. ToolInputError names what is not arithmetic here and
    the fix; ToolError says what failed on the values (division by zero, a size limit)."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolInputError(f"expression is longer than {MAX_EXPRESSION_CHARS} characters")
    text = expression.strip()
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ToolInputError(_character_message(text) or _syntax_message(text, exc)) from None
    try:
        return _check(_eval(tree.body, text))
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except (OverflowError, MemoryError):
        raise ToolError("result is too large") from None
    except RecursionError:
        raise ToolInputError("expression is nested too deeply") from None
    except (ValueError, TypeError) as exc:
        raise ToolError(f"cannot evaluate: {exc}") from None


ALLOWED = ("numbers, + - * / // % ** and ( ), pi, e and "
           + ", ".join(f"{name}(...)" for name in _FUNCTIONS))
"""What an expression may hold, for messages."""

_CHARACTER_FIXES = {
    "^": "`^` is not an operator here; use `**` for powers (3**2, not 3^2)",
    "{": "use ( ) for grouping, not { }", "}": "use ( ) for grouping, not { }",
    "[": "use ( ) for grouping, not [ ]", "]": "use ( ) for grouping, not [ ]",
    "\u00d7": "use * to multiply", "\u00f7": "use / to divide", "\u00b7": "use * to multiply",
    "=": "write only the expression, without = or a result",
    "<": "comparisons are not arithmetic here", ">": "comparisons are not arithmetic here",
    "!": "no factorials or comparisons here; write the product (5*4*3*2*1)",
    "$": "a $N reference is replaced by step N's output before this runs; here it was "
         "not one (write $1, $2 ... for an earlier step's result)",
    "&": "`&` is not an operator here", "|": "`|` is not an operator here",
    "@": "`@` is not an operator here", "~": "`~` is not an operator here",
    "'": "no strings here: write the number itself", '"': "no strings here: write the number "
    "itself",
}
_ALLOWED_CHARS = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_"
                           ".,+-*/%() \t\n")


def _character_message(text: str) -> str | None:
    """The first character no arithmetic has, named, with what to write instead."""
    for c in text:
        if c not in _ALLOWED_CHARS:
            fix = _CHARACTER_FIXES.get(c, f"{c!r} is not part of an arithmetic expression")
            return f"{fix}; an expression holds {ALLOWED}"
    return None


def _syntax_message(text: str, exc: SyntaxError) -> str:
    where = ""
    if exc.offset is not None and exc.offset > 1:
        column = max(exc.offset - 1, 0)
        piece = text[column:column + 10] or "the end"
        where = f" at column {column + 1} ({piece!r})"
    return (f"not an arithmetic expression: {exc.msg}{where}; write one like "
            f"`(17 + 25) * 3` or `sqrt(2) ** 2`, with {ALLOWED}")


def format_number(value: Number) -> str:
    """Integers exactly; floats to 15 significant digits (``0.1+0.2`` gives ``0.3``)."""
    return str(value) if isinstance(value, int) else format(value, ".15g")


_OPERATOR_FIXES: dict[type[ast.AST], str] = {
    ast.BitXor: "`^` is not an operator here; use `**` for powers (3**2, not 3^2)",
    ast.BitAnd: "`&` is not an operator here", ast.BitOr: "`|` is not an operator here",
    ast.LShift: "`<<` is not an operator here; write `* 2**n`",
    ast.RShift: "`>>` is not an operator here; write `// 2**n`",
    ast.MatMult: "`@` is not an operator here; use `*` to multiply",
    ast.Invert: "`~` is not an operator here", ast.Not: "`not` is not arithmetic",
}
_FUNCTION_FIXES = {"pow": "use `**` for powers (2**10)", "power": "use `**` for powers (2**10)",
                   "ln": "use log(x) (natural) or log(x, base)", "sqr": "use x**2",
                   "floor": "use x // 1", "ceil": "use -(-x // 1)", "int": "use round(x)",
                   "float": "write the number itself", "tan": "use sin(x) / cos(x)",
                   "sum": "write a + b + c", "log10": "use log(x, 10)", "log2": "use log(x, 2)",
                   "factorial": "write the product (5*4*3*2*1)"}


def _eval(node: ast.expr, text: str) -> Number:
    match node:
        case ast.Constant(value=bool()):
            raise ToolInputError("booleans are not numbers here")
        case ast.Constant(value=int() | float() as value):
            return value
        case ast.Constant(value=value):
            raise ToolInputError(f"only numbers are allowed, not {value!r}")
        case ast.Name(id=name) if name in _CONSTANTS:
            return _CONSTANTS[name]
        case ast.Name(id=name) if name.lower() in _CONSTANTS:
            raise ToolInputError(f"unknown name {name!r}; write {name.lower()!r}")
        case ast.Name(id=name) if name in _FUNCTIONS:
            raise ToolInputError(f"{name} is a function: write {name}(...)")
        case ast.Name(id=name):
            raise ToolInputError(
                f"unknown name {name!r}; only {', '.join(_CONSTANTS)} are defined: write the "
                "number itself (or $N for step N's result)")
        case ast.UnaryOp(op=op, operand=operand) if type(op) in _UNARY:
            return _check(_UNARY[type(op)](_eval(operand, text)))
        case ast.UnaryOp(op=op) | ast.BinOp(op=op) if type(op) in _OPERATOR_FIXES:
            raise ToolInputError(f"{_OPERATOR_FIXES[type(op)]}; an expression holds {ALLOWED}")
        case ast.BinOp(left=left, op=op, right=right) if type(op) in _BINARY:
            a, b = _eval(left, text), _eval(right, text)
            _check_size(op, a, b)
            return _check(_BINARY[type(op)](a, b))
        case ast.Call(func=ast.Name(id=name), keywords=[_, *_]):
            raise ToolInputError(f"function {name!r} takes no keyword arguments: write "
                                 f"{name}(x) or {name}(x, y)")
        case ast.Call(func=ast.Name(id=name), args=args) if name in _FUNCTIONS:
            _check_arity(name, len(args))
            return _check(_FUNCTIONS[name](*(_eval(arg, text) for arg in args)))
        case ast.Call(func=ast.Name(id=name)):
            fix = _FUNCTION_FIXES.get(name.lower(), "")
            fix = f"; {fix}" if fix else ""
            raise ToolInputError(f"function {name!r} is not allowed{fix}; allowed: "
                                 f"{', '.join(_FUNCTIONS)} (no keywords)")
        case ast.Attribute(attr=attr) if attr in _FUNCTIONS or attr in _CONSTANTS:
            written = ast.get_source_segment(text, node) or attr
            raise ToolInputError(f"{written!r} is not allowed: write {attr!r} alone "
                                 f"(e.g. sqrt(2), pi)")
        case ast.Call(func=ast.Attribute() as called):
            return _eval(called, text)  # refused, naming it: Math.sqrt(2) is no sqrt(2)
        case ast.Call(func=ast.Constant()):
            raise ToolInputError("a number cannot be called: write `*` between a number and "
                                 "`(`, e.g. 2*(3 + 4)")
        case ast.Compare():
            raise ToolInputError("comparisons are not arithmetic here; write only the "
                                 "expression to compute")
        case ast.BoolOp():
            raise ToolInputError("`and` / `or` are not arithmetic here")
        case ast.Tuple():
            raise ToolInputError("a comma separates a function's arguments only; write "
                                 "one expression (and 1000, not 1,000)")
        case ast.List() | ast.Set() | ast.Dict() | ast.Subscript():
            raise ToolInputError(f"{type(node).__name__} is not allowed: use ( ) for "
                                 f"grouping, not [ ] or {{ }}; an expression holds {ALLOWED}")
        case _:
            written = ast.get_source_segment(text, node) or ""
            raise ToolInputError(f"{type(node).__name__} is not allowed in an arithmetic "
                                 f"expression ({written[:40]!r}); it holds {ALLOWED}")


def _check_arity(name: str, count: int) -> None:
    if name in _ONE_ARG and count != 1:
        raise ToolInputError(f"{name} takes one argument: {name}(x)")
    if name in _ONE_OR_TWO and count not in (1, 2):
        raise ToolInputError(f"{name} takes one or two arguments: {name}(x) or {name}(x, n)")
    if name in _TWO_OR_MORE and count < 2:
        raise ToolInputError(f"{name} takes two or more arguments: {name}(a, b, ...)")


def _check_size(op: ast.operator, a: Number, b: Number) -> None:
    """Refuse integer ``**`` and ``*`` whose result would exceed MAX_INT_BITS."""
    if not (isinstance(a, int) and isinstance(b, int)):
        return
    if isinstance(op, ast.Pow) and abs(a) > 1 and b * max(a.bit_length() - 1, 1) > MAX_INT_BITS:
        raise ToolError(f"{a}**{b} is too large (limit about {MAX_INT_BITS} bits)")
    if isinstance(op, ast.Mult) and a.bit_length() + b.bit_length() > MAX_INT_BITS + 1:
        raise ToolError(f"product is too large (limit about {MAX_INT_BITS} bits)")


def _check(value: object) -> Number:
    """Only finite real numbers of bounded size leave an operation."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ToolError(f"result is not a real number: {value!r}")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise ToolError(f"result is too large (limit about {MAX_INT_BITS} bits)")
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError("result is not finite (overflow)")
    return value


class MathTool(StructTool[MathArgs]):
    """Evaluates arithmetic exactly where Python's ints can, without ``eval``."""

    name = "math"
    description = (
        "Evaluate an arithmetic expression and return the number. Supports + - * / // % **, "
        "parentheses, pi, e and abs, round, min, max, sqrt, log, exp, sin, cos."
    )
    args_type = MathArgs

    async def call(self, args: MathArgs) -> str:
        return format_number(evaluate(args.expression))
