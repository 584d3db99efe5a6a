"""The plan constraint as JSON Schema, for servers that take a schema and not a grammar.

A schema cannot ask for lines, so the plan is ``{"steps": [...]}`` (streamed and read step
by step by :mod:`runtime.models.json_stream`), and it cannot count: ids are limited to this
attempt's, dependencies to the ids the plan may name, but "consecutive" and "only earlier
steps" are left to the scheduler, which stays the judge. Each step is one of a few
shapes, one per role and tool (and one per role for agent steps), so a role can only name
its own tools. ``strict`` follows OpenAI's strict mode: every property required (optional
ones nullable), no extra properties; a tool whose arguments cannot be written so (any
object) makes the schema non-strict.
"""

from __future__ import annotations

import copy
from typing import Any

from ...tools import public_schema
from .plan import PlanShape, RoleTools

__all__ = ["PLAN_SCHEMA_NAME", "drop_nulls", "plan_schema"]

PLAN_SCHEMA_NAME = "plan"
_LOOSE = ("default", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
          "multipleOf", "minLength", "maxLength", "format", "minItems", "maxItems")
"""Keywords left out in strict mode (the tool checks its arguments itself before it runs).
A ``pattern`` stays: strict mode takes it, and it keeps a model to what a tool reads."""


def plan_schema(shape: PlanShape, *, strict: bool = True) -> tuple[dict[str, Any], bool]:
    """The schema of every plan of ``shape``, and whether it is strict (asked for, and every
    tool's arguments could be written so).

    The ids and dependencies are defined once, under the root's ``$defs`` (strict mode
    counts enum values across the schema), with the tools' own definitions beside them. A
    schema that is not strict bounds its arrays (a small model repeats items until its
    max_tokens otherwise)."""
    ids = list(shape.ids())
    refs = sorted({*shape.prior, *ids[:-1]})
    defs: dict[str, Any] = {
        "step_id": {"type": "integer", "enum": ids},
        "dependency": {"type": "integer", "enum": refs} if refs else {"type": "integer"},
        "dependencies": {"type": "array", "items": {"$ref": "#/$defs/dependency"}}}
    variants: list[dict[str, Any]] = []
    strict = strict and all(strict_object(shape.schemas.get(t))[1]
                            for role in shape.roles for t in role.tools)
    for role in shape.roles:
        for tool in role.tools:
            args = strict_object(shape.schemas.get(tool))[0] if strict \
                else copy.deepcopy(public_schema(shape.schemas.get(tool)) or {"type": "object"})
            variants.append(_step(role, {"tool": {"type": "string", "enum": [tool]},
                                         "args": _hoist(args, f"{tool}.", defs)}))
        if role.agent:
            tools: dict[str, Any] = {"type": "null"}
            if role.tools:
                listed = {"type": "array", "items": {"type": "string", "enum": list(role.tools)}}
                tools = {"anyOf": [listed, {"type": "null"}]}
            variants.append(_step(role, {
                "instruction": {"type": "string"}, "tools": tools,
                "review": {"type": "boolean"}}))
    steps: dict[str, Any] = {"type": "array", "items": {"anyOf": variants}}
    if not strict:  # OpenAI's strict mode takes no array bounds
        steps |= {"minItems": shape.min_steps, "maxItems": shape.count}
        defs["dependencies"] |= {"maxItems": len(refs), "uniqueItems": True}
    schema = {"type": "object", "properties": {"steps": steps}, "required": ["steps"],
              "additionalProperties": False, "$defs": defs}
    return schema, strict


def _step(role: RoleTools, body: dict[str, Any]) -> dict[str, Any]:
    properties = {"id": {"$ref": "#/$defs/step_id"},
                  "role": {"type": "string", "enum": [role.name]},
                  "title": {"type": "string"},
                  "depends_on": {"$ref": "#/$defs/dependencies"},
                  **body}
    return {"type": "object", "properties": properties, "required": list(properties),
            "additionalProperties": False}


def _hoist(schema: dict[str, Any], prefix: str, defs: dict[str, Any]) -> dict[str, Any]:
    """The tool's schema with its ``$defs`` moved to the root's (``#/$defs/...`` refers to
    the root), renamed ``<tool>.<name>``."""
    own = schema.pop("$defs", {})

    def rename(node: Any) -> Any:
        if isinstance(node, list):
            return [rename(n) for n in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            node = {**node, "$ref": "#/$defs/" + prefix + ref.removeprefix("#/$defs/")}
        return {k: rename(v) if k != "enum" and k != "const" else v for k, v in node.items()}

    for name, sub in own.items():
        defs[prefix + name] = rename(sub)
    result: dict[str, Any] = rename(schema)
    return result


def strict_object(schema: dict[str, Any] | None) -> tuple[dict[str, Any], bool]:
    """A tool's argument schema in strict mode's terms, and whether that was possible."""
    if not isinstance(schema, dict) or schema.get("type") != "object" \
            or not schema.get("properties"):
        return {"type": "object"}, False
    result = copy.deepcopy(public_schema(schema))
    ok = _tighten(result)
    for key in ("$defs",):
        for sub in result.get(key, {}).values():
            ok = _tighten(sub) and ok
    return result, ok


def _tighten(node: Any) -> bool:
    """Make every object of ``node`` strict in place; False where one cannot be."""
    if not isinstance(node, dict):
        return True
    for key in _LOOSE:
        node.pop(key, None)
    ok = True
    if node.get("type") == "object":
        props = node.get("properties")
        if not props or node.get("additionalProperties") not in (None, False):
            return False
        required = set(node.get("required", ()))
        for key, sub in props.items():
            ok = _tighten(sub) and ok
            if key not in required and not _takes_null(sub):
                props[key] = {"anyOf": [sub, {"type": "null"}]}
        node["required"] = list(props)
        node["additionalProperties"] = False
    for key in ("items",):
        ok = _tighten(node.get(key)) and ok
    for key in ("anyOf", "oneOf"):
        for sub in node.get(key, ()):
            ok = _tighten(sub) and ok
    return ok


def drop_nulls(args: dict[str, Any], schema: dict[str, Any] | None) -> dict[str, Any]:
    """Arguments without the ``null``s strict mode made the model write for optional
    properties it did not want to set (properties that took null before keep it)."""
    if not isinstance(schema, dict):
        return args
    props = schema.get("properties", {})
    required = set(schema.get("required", ()))
    return {k: v for k, v in args.items()
            if v is not None or k in required or _takes_null(props.get(k))}


def _takes_null(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return True
    if "enum" in schema or "const" in schema:
        return None in schema.get("enum", [schema.get("const", 0)])
    if not {"type", "anyOf", "$ref"} & schema.keys():
        return True  # any value
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    return any(_takes_null(s) for s in schema.get("anyOf", ()) if isinstance(s, dict)
               and s.get("type") == "null")
