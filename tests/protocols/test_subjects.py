"""Subjects are built in one place and every token is checked."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols import InvalidSubjectToken, Stream, Verb, stream_name, subject


def test_subjects_have_the_documented_shape() -> None:
    assert subject("plancast", Verb.RUN_SUBMIT) == "plancast.run.submit"
    assert subject("plancast", Verb.STEP, "coder") == "plancast.step.coder"
    assert subject("team.a", Verb.EVENT, "r1") == "team.a.event.r1"
    assert subject("p", Verb.HEARTBEAT, "coder", "h-1") == "p.heartbeat.coder.h-1"


@given(st.text(max_size=5), st.sampled_from(". *>\t\n"), st.text(max_size=5))
def test_tokens_with_subject_structure_are_refused(head: str, structure: str, tail: str) -> None:
    with pytest.raises(InvalidSubjectToken):
        subject("plancast", Verb.STEP, head + structure + tail)


def test_arity_and_wildcards() -> None:
    with pytest.raises(ValueError, match="takes 1"):
        subject("plancast", Verb.STEP)
    assert subject("plancast", Verb.STEP, wildcard=True) == "plancast.step.>"
    assert subject("plancast", Verb.HEARTBEAT, "*", "*", wildcard=True) == "plancast.heartbeat.*.*"
    with pytest.raises(InvalidSubjectToken):
        subject("plancast", Verb.STEP, ">", "x", wildcard=True)
    with pytest.raises(InvalidSubjectToken):
        subject("bad prefix", Verb.RUN_SUBMIT)


def test_streams_do_not_overlap_and_names_are_valid() -> None:
    seen: set[str] = set()
    for kind in Stream:
        for subj in kind.subjects("plancast"):
            assert subj not in seen
            seen.add(subj)
        assert "." not in stream_name("team.a", kind)
