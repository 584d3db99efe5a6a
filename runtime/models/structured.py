"""Structured output in the dialect a model's server speaks: plans, verdicts, decisions.

A model preset says which (``structured = ...`` under ``[models.NAME]``):

- ``"off"`` (the default): nothing is sent; answers are read tolerantly.
- ``"json_schema"``: OpenAI's ``response_format`` ``{"type": "json_schema", ...}``, strict
  where the schema allows (OpenAI, and servers that copy it).
- ``"json_object_schema"``: ``response_format`` ``{"type": "json_object", "schema": ...}``
  (llama.cpp's server, llama-cpp-python).
- ``"grammar"``: a GBNF ``grammar`` field (llama.cpp's server, llama-cpp-python).
- ``"vllm"``: vLLM's ``structured_outputs`` (the GBNF grammar for plans, a schema for
  answers).

A grammar keeps the plan as JSON Lines and constrains it most (consecutive ids, only
earlier dependencies); a schema wraps the steps in ``{"steps": [...]}``. A server that
answers a constrained request with an error naming the constraint is misconfigured, not
failing: :func:`refusal` turns that into a :class:`StructuredOutputUnsupported` that says
which setting to change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from ..config import DIALECTS
from ..tools import args_schema
from .errors import StructuredOutputUnsupported
from .grammar import (
    PLAN_SCHEMA_NAME,
    Grammar,
    JsonRules,
    PlanShape,
    plan_grammar,
    plan_schema,
    strict_object,
)

if TYPE_CHECKING:
    from ..config import ModelSettings

__all__ = ["Constraint", "answer_constraint", "plan_constraint", "refusal"]

Framing = Literal["lines", "steps"]

_NAMES = ("response_format", "json_schema", "json_object", "grammar", "structured_outputs")
"""Words in a server's error that say it refused the constraint."""


@dataclass(frozen=True)
class Constraint:
    """What one request adds to its body, and how the answer is framed."""

    dialect: str
    """The preset's ``structured`` setting."""
    body: dict[str, Any]
    """Fields merged into the request body (``response_format``, ``grammar`` ...)."""
    framing: Framing = "lines"
    """A plan as JSON Lines, or as ``{"steps": [...]}``."""


def plan_constraint(dialect: str, shape: PlanShape | None) -> Constraint | None:
    """The constraint of a plan request, or None (dialect ``off``, or nothing to constrain)."""
    if dialect == "off" or shape is None:
        return None
    if dialect == "grammar":
        return Constraint(dialect, {"grammar": plan_grammar(shape)})
    if dialect == "vllm":
        return Constraint(dialect, {"structured_outputs": {"grammar": plan_grammar(shape)}})
    schema, strict = plan_schema(shape, strict=dialect == "json_schema")
    return Constraint(dialect, _schema_body(dialect, PLAN_SCHEMA_NAME, schema, strict),
                      framing="steps")


def answer_constraint(dialect: str, answer_type: type[msgspec.Struct]) -> Constraint | None:
    """The constraint of a critic's or synthesizer's answer, or None for ``off``."""
    if dialect == "off":
        return None
    schema = args_schema(answer_type)
    if dialect == "grammar":
        g = Grammar()
        json = JsonRules(g)
        g.rule("root", json.value(schema, "answer", json.string))
        return Constraint(dialect, {"grammar": g.render()})
    if dialect == "vllm":
        return Constraint(dialect, {"structured_outputs": {"json": schema}})
    strict_schema, strict = strict_object(schema) if dialect == "json_schema" else (schema, False)
    return Constraint(dialect, _schema_body(dialect, answer_type.__name__,
                                            strict_schema if strict else schema, strict))


def _schema_body(dialect: str, name: str, schema: dict[str, Any],
                 strict: bool) -> dict[str, Any]:
    if dialect == "json_object_schema":
        return {"response_format": {"type": "json_object", "schema": schema}}
    if dialect != "json_schema":
        raise ValueError(f"unknown structured dialect {dialect!r}; use one of {DIALECTS}")
    return {"response_format": {"type": "json_schema", "json_schema": {
        "name": name, "schema": schema, "strict": strict}}}


def refusal(status: int, detail: str, settings: ModelSettings,
            constraint: Constraint | None, *,
            shown: str | None = None) -> StructuredOutputUnsupported | None:
    """The configuration error an HTTP error means, if the server refused our constraint;
    ``shown`` is the server's own message, quoted instead of the whole ``detail``."""
    if constraint is None or status < 400 or not any(n in detail for n in _NAMES):
        return None
    others = " or ".join(repr(d) for d in DIALECTS if d != constraint.dialect)
    if settings.name:
        who, where = f"model preset {settings.name!r}", f"[models.{settings.name}]"
    else:
        who, where = f"model {settings.model!r}", "the role's model table"
    return StructuredOutputUnsupported(
        f"{who}: the server at {settings.effective_base_url()} does not speak structured = "
        f"{constraint.dialect!r} (HTTP {status}: {' '.join((shown or detail).split())[:300]}); set "
        f"structured = {others} under {where}")
