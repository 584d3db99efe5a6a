"""Run ids, and where a sub-team's run comes from (hierarchical teams)."""

from __future__ import annotations

import hashlib
from typing import Annotated

import msgspec

from .plan import StepId

TOKEN_PATTERN = r"^[A-Za-z0-9_-]{1,64}(?![\s\S])"
"""A subject-safe token. The lookahead ends the string in Python and JSON Schema alike
(``$`` would let a trailing newline through in Python)."""

RunId = Annotated[str, msgspec.Meta(pattern=TOKEN_PATTERN)]
"""A run's id; also a subject token, so letters, digits, ``_`` and ``-`` only."""


def child_run_id(parent_run: str, step_id: int, attempt: int) -> str:
    """The id of the run a sub-team starts for one attempt of a parent run's step.

    Derived, so the team lead's retries submit the same run (idempotently) and the parent's
    planner can name the child to cancel it without asking anyone. Too long for a token, it
    becomes a digest of the same parts."""
    plain = f"{parent_run}-s{step_id}a{attempt}"
    if len(plain) <= 64:
        return plain
    digest = hashlib.sha256(f"{parent_run}/{step_id}/{attempt}".encode()).hexdigest()
    return f"run-{digest[:24]}"


class ParentStep(msgspec.Struct, frozen=True, kw_only=True):
    """Where a sub-team's run comes from: one attempt of one step of its parent run."""

    run_id: RunId
    """The parent run."""
    step_id: StepId
    """The parent run's step delegated to the sub-team."""
    attempt: int = 1
    """The step's attempt."""
    depth: Annotated[int, msgspec.Meta(ge=1, le=100)] = 1
    """This run's depth in the tree: 1 for a child of a top-level run, 2 for a grandchild."""
    role: str = ""
    """The ``team`` role that started it."""
