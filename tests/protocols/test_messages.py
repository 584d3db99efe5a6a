"""The wire contract: round trips, schema evolution, tags, schema export."""

from __future__ import annotations

from typing import Any

import jsonschema
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import protocols
from protocols import PUBLIC_MESSAGES, SCHEMA_VERSION, Message, StepTask, decode, encode

from .strategies import for_type

WIRE_UNION: Any = PUBLIC_MESSAGES[0]
for _t in PUBLIC_MESSAGES[1:]:
    WIRE_UNION = WIRE_UNION | _t


@settings(max_examples=300, deadline=None)
@given(st.one_of(*[for_type(t) for t in PUBLIC_MESSAGES]))
def test_every_message_round_trips_through_the_wire_union(message: Message) -> None:
    data = encode(message)
    assert decode(data, WIRE_UNION) == message
    assert decode(data, type(message)) == message


@pytest.mark.parametrize("message_type", PUBLIC_MESSAGES, ids=lambda t: t.__name__)
def test_every_message_has_a_unique_dotted_tag_and_a_schema_version(message_type: Any) -> None:
    info = msgspec.inspect.type_info(message_type)
    assert isinstance(info, msgspec.inspect.StructType)
    assert info.tag_field == "type"
    assert isinstance(info.tag, str) and info.tag == info.tag.lower() and "." in info.tag
    assert {f.name for f in info.fields} >= {"schema_version"}
    tags = [msgspec.inspect.type_info(t).tag for t in PUBLIC_MESSAGES]  # type: ignore[union-attr]
    assert tags.count(info.tag) == 1


def test_schema_version_is_on_the_wire() -> None:
    task = protocols.RunRequest(goal="x")
    assert msgspec.json.decode(encode(task))["schema_version"] == SCHEMA_VERSION


def test_decoding_ignores_unknown_fields_and_fills_defaults() -> None:
    """The evolution rule: a newer sender may add fields; an older one may omit them."""
    wire = (
        b'{"type":"step.task","schema_version":7,"run_id":"r1","goal":"g",'
        b'"step":{"id":3,"role":"coder","instruction":"do","future_step_field":[1,2]},'
        b'"added_in_v7":{"nested":true}}'
    )
    task = decode(wire, StepTask)
    assert task.schema_version == 7
    assert task.step.id == 3 and task.step.depends_on == [] and task.step.review is False
    assert task.attempt == 1 and task.inputs == {} and task.feedback == ""


@pytest.mark.parametrize(
    ("wire", "fragment"),
    [
        (b'{"type":"step.task","run_id":"r 1","goal":"g","step":{"id":1,"role":"x"}}', "run_id"),
        (b'{"type":"step.task","run_id":"r1","goal":"g","step":{"id":0,"role":"x"}}', "id"),
        (b'{"type":"step.task","run_id":"r1\\n","goal":"g","step":{"id":1,"role":"x"}}',
         "run_id"),
        (b'{"type":"step.task","run_id":"r1","goal":"g","step":{"id":1,"role":"x\\n"}}',
         "role"),
        (b'{"type":"step.result","run_id":"r1","step_id":1}', "attempt"),
        (b'{"type":"nope","run_id":"r1"}', "type"),
    ],
)
def test_invalid_messages_are_refused_with_the_field_named(wire: bytes, fragment: str) -> None:
    with pytest.raises(msgspec.ValidationError, match=fragment):
        decode(wire, WIRE_UNION)


def test_schema_is_valid_json_schema_and_describes_real_messages() -> None:
    schema = protocols.json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert len(schema["oneOf"]) == len(PUBLIC_MESSAGES)
    validator = jsonschema.Draft202012Validator(schema)
    sample = StepTask(
        run_id="r1",
        goal="g",
        step=protocols.Step(id=1, role="coder", tool="math", args={"expression": "$1+1"}),
    )
    validator.validate(msgspec.json.decode(encode(sample)))
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({"type": "step.task", "run_id": "r1"})


def test_usage_adds_up() -> None:
    a = protocols.Usage(calls=1, prompt_tokens=10, completion_tokens=5, cost_usd=0.5)
    total = a + a
    assert (total.calls, total.total_tokens, total.cost_usd) == (2, 30, 1.0)
