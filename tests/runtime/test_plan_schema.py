"""The plan constraint as JSON Schema: what it admits, and that strict mode can take it."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from runtime.models import (
    PlanShape,
    RoleTools,
    answer_constraint,
    drop_nulls,
    plan_constraint,
    plan_schema,
    strict_object,
)

from .test_plan_constraint import SCHEMAS

SHAPE = PlanShape(first_id=4, prior=(1, 3), schemas=SCHEMAS, max_steps=3, roles=(
    RoleTools("worker", ("echo", "python"), agent=False),
    RoleTools("writer", ("math",), agent=True)))
STRICT_KEYWORDS = {"type", "properties", "required", "additionalProperties", "items", "anyOf",
                   "enum", "const", "description", "$defs", "$ref", "title",
                   "pattern"}  # a string's pattern: OpenAI's strict mode takes it


def strict_problems(node: Any, path: str = "$") -> list[str]:
    """Where a schema leaves OpenAI's strict subset (every property required, no extra
    properties, no keywords it does not take)."""
    if isinstance(node, list):
        return [p for i, n in enumerate(node) for p in strict_problems(n, f"{path}[{i}]")]
    if not isinstance(node, dict):
        return []
    found = [f"{path}: {k}" for k in node if k not in STRICT_KEYWORDS]
    if node.get("type") == "object":
        if node.get("additionalProperties") is not False:
            found.append(f"{path}: additionalProperties")
        if set(node.get("required", ())) != set(node.get("properties", {})):
            found.append(f"{path}: not all required")
    for key in ("properties", "$defs"):
        for name, sub in node.get(key, {}).items():
            found += strict_problems(sub, f"{path}.{name}")
    for key in ("items", "anyOf"):
        if key in node:
            found += strict_problems(node[key], f"{path}.{key}")
    return found


def step(**fields: Any) -> dict[str, Any]:
    base = {"id": 4, "role": "worker", "title": "", "depends_on": []}
    return base | fields


def test_tool_args_that_fit_strict_mode_make_a_strict_schema() -> None:
    schema, strict = plan_schema(SHAPE)
    assert strict and strict_problems(schema) == []
    plan = {"steps": [
        step(tool="echo", args={"text": "$1"}),
        step(id=5, tool="python", depends_on=[4], args={"code": "print(1)", "timeout": None}),
        step(id=6, role="writer", instruction="go", tools=["math"], review=False)]}
    jsonschema.validate(plan, schema)


def test_a_schema_that_is_not_strict_bounds_its_arrays_and_keeps_optional_args() -> None:
    schema, strict = plan_schema(SHAPE, strict=False)
    assert not strict
    assert schema["$defs"]["dependencies"]["maxItems"] == len([1, 3, 4, 5])
    assert schema["properties"]["steps"]["maxItems"] == 3
    plan = {"steps": [step(tool="python", args={"code": "print(1)"})]}
    jsonschema.validate(plan, schema)  # timeout left out: no null needed
    for wrong in ([1, 1], [1, 3, 4, 5, 1]):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"steps": [step(tool="echo", args={"text": "a"},
                                                depends_on=wrong)]}, schema)


@pytest.mark.parametrize("wrong", [
    step(tool="math", args={"expression": "1"}),          # a tool of another role
    step(role="boss", tool="echo", args={"text": "a"}),    # no such role
    step(id=3, tool="echo", args={"text": "a"}),           # an id before this attempt's
    step(id=7, tool="echo", args={"text": "a"}),           # past max_steps
    step(depends_on=[2], tool="echo", args={"text": "a"}),  # a dropped step
    step(tool="echo", args={"text": "a", "more": 1}),      # an argument the tool lacks
    step(role="writer", instruction="go", tools=["echo"], review=False),
    step(role="worker", instruction="go", tools=None, review=False),  # tool-only role
])
def test_the_schema_refuses(wrong: dict[str, Any]) -> None:
    schema, _ = plan_schema(SHAPE)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"steps": [wrong]}, schema)


def test_tool_definitions_move_to_the_root() -> None:
    shape = PlanShape(first_id=1, prior=(), roles=(RoleTools("w", ("nested",), False),),
                      schemas=SCHEMAS, max_steps=2)
    schema, strict = plan_schema(shape)
    assert strict and strict_problems(schema) == []
    assert "nested.Item" in schema["$defs"]
    args = {"items": [{"label": "a", "flag": None}], "mode": "a", "n": None}
    jsonschema.validate({"steps": [step(id=1, role="w", tool="nested", args=args)]}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"steps": [step(id=1, role="w", tool="nested",
                                            args={**args, "items": [{"flag": True}]})]}, schema)
    assert "$defs" not in schema["properties"]["steps"]["items"]["anyOf"][0]["properties"][
        "args"]


def test_a_tool_known_by_name_only_makes_it_non_strict_with_bounds() -> None:
    shape = PlanShape(first_id=1, prior=(), roles=(RoleTools("w", ("remote",), False),),
                      schemas={"remote": None}, max_steps=2)
    schema, strict = plan_schema(shape)
    assert not strict
    assert schema["properties"]["steps"]["maxItems"] == 2
    jsonschema.validate({"steps": [step(id=1, role="w", tool="remote", args={"any": [1]})]},
                        schema)


def test_strict_objects_make_optional_properties_nullable() -> None:
    schema, strict = strict_object(SCHEMAS["nested"])
    assert strict and strict_problems(schema) == []
    assert schema["required"] == ["items", "mode", "n"]
    args = {"items": [{"label": "a", "flag": None}], "mode": None, "n": None}
    jsonschema.validate(args, schema)
    # the nulls strict mode forced are dropped again; a property that takes null keeps it
    assert drop_nulls(args, SCHEMAS["nested"]) == {"items": [{"label": "a", "flag": None}],
                                                   "n": None}


def test_each_dialect_sends_its_fields() -> None:
    bodies = {d: plan_constraint(d, SHAPE) for d in
              ("json_schema", "json_object_schema", "grammar", "vllm", "off")}
    assert bodies["off"] is None
    assert bodies["json_schema"] is not None and bodies["json_schema"].framing == "steps"
    assert bodies["json_schema"].body["response_format"]["json_schema"]["strict"] is True
    assert bodies["json_object_schema"] is not None
    assert bodies["json_object_schema"].body["response_format"]["type"] == "json_object"
    assert bodies["grammar"] is not None and bodies["grammar"].framing == "lines"
    assert bodies["grammar"].body["grammar"].startswith("root ::= ")
    assert bodies["vllm"] is not None
    assert bodies["vllm"].body["structured_outputs"]["grammar"] == bodies["grammar"].body[
        "grammar"]
    assert plan_constraint("grammar", None) is None


def test_answer_schemas_are_strict_for_json_schema() -> None:
    from actors.answers import DecisionAnswer, VerdictAnswer

    for answer in (DecisionAnswer, VerdictAnswer):
        constraint = answer_constraint("json_schema", answer)
        assert constraint is not None
        spec = constraint.body["response_format"]["json_schema"]
        assert spec["strict"] is True and strict_problems(spec["schema"]) == []
