"""The plan constraint as JSON Schema, for servers that take a schema and not a grammar.

A schema cannot ask for lines, so the plan is ``{"steps": [...]}`` (streamed and read step
by step by :mod:`runtime.json_stream`), and it cannot count: ids are limited to this
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

from .plan_constraint import PlanShape, RoleTools

__all__ = ["PLAN_SCHEMA_NAME", "drop_nulls", "plan_schema"]

PLAN_SCHEMA_NAME = "plan"


def plan_schema(shape: PlanShape) -> tuple[dict[str, Any], bool]:
    """The schema of every plan of ``shape``, and whether it is valid in strict mode."""
    ids = list(shape.ids())
    refs = sorted({*shape.prior, *ids[:-1]})
    variants: list[dict[str, Any]] = []
    strict = True
    for role in shape.roles:
        for tool in role.tools:
            args, ok = strict_object(shape.schemas.get(tool))
            strict = strict and ok
            variants.append(_step(ids, refs, role, {"tool": {"type": "string", "enum": [tool]},
                                                    "args": args}))
        if role.agent:
            tools: dict[str, Any] = {"type": "null"}
            if role.tools:
                listed = {"type": "array", "items": {"type": "string", "enum": list(role.tools)}}
                tools = {"anyOf": [listed, {"type": "null"}]}
            variants.append(_step(ids, refs, role, {
                "instruction": {"type": "string"}, "tools": tools,
                "review": {"type": "boolean"}}))
    steps: dict[str, Any] = {"type": "array", "items": {"anyOf": variants}}
    if not strict:  # OpenAI's strict mode takes no array bounds
        steps |= {"minItems": shape.min_steps, "maxItems": shape.count}
    schema = {"type": "object", "properties": {"steps": steps}, "required": ["steps"],
              "additionalProperties": False}
    return schema, strict


def _step(ids: list[int], refs: list[int], role: RoleTools,
          body: dict[str, Any]) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "integer", "enum": refs} if refs else {"type": "integer"}
    deps = {"type": "array", "items": item}
    properties = {"id": {"type": "integer", "enum": ids},
                  "role": {"type": "string", "enum": [role.name]},
                  "title": {"type": "string"}, "depends_on": deps, **body}
    return {"type": "object", "properties": properties, "required": list(properties),
            "additionalProperties": False}


def strict_object(schema: dict[str, Any] | None) -> tuple[dict[str, Any], bool]:
    """A tool's argument schema in strict mode's terms, and whether that was possible."""
    if not isinstance(schema, dict) or schema.get("type") != "object" \
            or not schema.get("properties"):
        return {"type": "object"}, False
    result = copy.deepcopy(schema)
    ok = _tighten(result)
    for key in ("$defs",):
        for sub in result.get(key, {}).values():
            ok = _tighten(sub) and ok
    return result, ok


def _tighten(node: Any) -> bool:
    """Make every object of ``node`` strict in place; False where one cannot be."""
    if not isinstance(node, dict):
        return True
    node.pop("default", None)
    ok = True
    if node.get("type") == "object":
        props = node.get("properties")
        if not props or node.get("additionalProperties") not in (None, False):
            return False
        required = set(node.get("required", ()))
        for key, sub in props.items():
            ok = _tighten(sub) and ok
            if key not in required:
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
    if not isinstance(schema, dict) or ("type" not in schema and "anyOf" not in schema):
        return True
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    return any(_takes_null(s) for s in schema.get("anyOf", ()) if isinstance(s, dict)
               and s.get("type") == "null")
