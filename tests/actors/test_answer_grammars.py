"""Every answer the critic's or synthesizer's grammar admits is one they can read."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.answers import DecisionAnswer, VerdictAnswer, find_json_object
from runtime.models import answer_constraint

from ..runtime.gbnf_check import parse_gbnf


@pytest.mark.parametrize("answer", [VerdictAnswer, DecisionAnswer])
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_every_admitted_answer_decodes(answer: type[msgspec.Struct], data: st.DataObject) -> None:
    constraint = answer_constraint("grammar", answer)
    assert constraint is not None
    text = parse_gbnf(constraint.body["grammar"]).draw(data)
    msgspec.json.decode(text, type=answer)  # the answer type takes it
    assert find_json_object(text) == msgspec.json.decode(text)  # and the reader finds it
