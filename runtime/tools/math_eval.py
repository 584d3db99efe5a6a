"""``math``: arithmetic for models, evaluated by walking the AST (never ``eval``).

Only numbers, arithmetic operators, ``pi``/``e`` and a few functions are allowed, and
sizes are bounded before computing, so ``9**9**9`` is refused instead of hanging a worker.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Annotated, Any

import msgspec

from ._base import StructTool
from .errors import ToolError

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


class MathArgs(msgspec.Struct, forbid_unknown_fields=True):
    expression: Annotated[
        str,
        msgspec.Meta(description="An arithmetic expression, e.g. `2**10 / 3` or `sqrt(2) * pi`."),
    ]


def evaluate(expression: str) -> Number:
    """The value of ``expression``; ToolError says what is not allowed or what failed."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
        return _check(_eval(tree.body))
    except SyntaxError as exc:
        raise ToolError(f"not an arithmetic expression: {exc.msg}") from None
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except (OverflowError, MemoryError):
        raise ToolError("result is too large") from None
    except RecursionError:
        raise ToolError("expression is nested too deeply") from None
    except (ValueError, TypeError) as exc:
        raise ToolError(f"cannot evaluate: {exc}") from None


def format_number(value: Number) -> str:
    """Integers exactly; floats to 15 significant digits (``0.1+0.2`` gives ``0.3``)."""
    return str(value) if isinstance(value, int) else format(value, ".15g")


def _eval(node: ast.expr) -> Number:
    match node:
        case ast.Constant(value=bool()):
            raise ToolError("booleans are not numbers here")
        case ast.Constant(value=int() | float() as value):
            return value
        case ast.Constant(value=value):
            raise ToolError(f"only numbers are allowed, not {value!r}")
        case ast.Name(id=name) if name in _CONSTANTS:
            return _CONSTANTS[name]
        case ast.Name(id=name):
            raise ToolError(f"unknown name {name!r}; only {', '.join(_CONSTANTS)} are defined")
        case ast.UnaryOp(op=op, operand=operand) if type(op) in _UNARY:
            return _check(_UNARY[type(op)](_eval(operand)))
        case ast.BinOp(left=left, op=op, right=right) if type(op) in _BINARY:
            a, b = _eval(left), _eval(right)
            _check_size(op, a, b)
            return _check(_BINARY[type(op)](a, b))
        case ast.Call(func=ast.Name(id=name), args=args, keywords=[]) if name in _FUNCTIONS:
            return _check(_FUNCTIONS[name](*(_eval(arg) for arg in args)))
        case ast.Call(func=ast.Name(id=name)):
            allowed = ", ".join(_FUNCTIONS)
            raise ToolError(f"function {name!r} is not allowed; allowed: {allowed} (no keywords)")
        case _:
            raise ToolError(f"{type(node).__name__} is not allowed in an arithmetic expression")


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
