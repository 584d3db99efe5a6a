"""Each element of a streamed ``{"steps": [...]}`` comes out whole, however the text is cut."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.models import StepArrayReader

NASTY = st.text(alphabet=st.sampled_from(list('{}[]",:\\ ab$\n\u00e9')), max_size=12)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | NASTY,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(NASTY, inner, max_size=3),
    max_leaves=8)
STEPS = st.lists(st.dictionaries(NASTY, VALUES, max_size=4), max_size=5)


def read(text: str, cuts: list[int]) -> tuple[list[str], StepArrayReader]:
    reader = StepArrayReader()
    found: list[str] = []
    start = 0
    for cut in [*sorted({min(c, len(text)) for c in cuts}), len(text)]:
        found += reader.feed(text[start:cut])
        start = cut
    return found + reader.finish(), reader


@settings(max_examples=300, deadline=None)
@given(steps=STEPS, cuts=st.lists(st.integers(0, 400), max_size=30), indent=st.booleans())
def test_every_step_comes_out_whole_and_in_order(steps: list[dict[str, Any]], cuts: list[int],
                                                  indent: bool) -> None:
    text = json.dumps({"steps": steps}, indent=2 if indent else None, ensure_ascii=False)
    found, reader = read(text, cuts)
    assert [json.loads(item) for item in found] == steps
    assert reader.done


def test_a_step_is_handed_out_the_moment_it_closes() -> None:
    reader = StepArrayReader()
    assert reader.feed('{"steps": [{"id": 1, "args": {"t": "}"}') == []
    assert reader.feed("}") == ['{"id": 1, "args": {"t": "}"}}']
    assert reader.feed(', {"id": 2}') == ['{"id": 2}']
    assert not reader.done
    assert reader.feed("]}") == [] and reader.done


def test_a_bare_array_and_text_around_it() -> None:
    found, _ = read('Sure! [{"id": 1}] and later {"id": 9}', [3, 9])
    assert found == ['{"id": 1}']


def test_scalars_and_a_cut_off_step_are_handed_out_for_the_scheduler_to_refuse() -> None:
    found, reader = read('{"steps": [1, "two", {"id": 3', [])
    assert found == ["1", '"two"', '{"id": 3']
    assert not reader.done


def test_only_the_first_array_counts() -> None:
    found, _ = read('{"steps": [{"id": 1}], "more": [{"id": 2}]}', [])
    assert found == ['{"id": 1}']
