"""A plan: a DAG of steps, as the planner's model writes it (one JSON object per line)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

StepId = Annotated[int, msgspec.Meta(ge=1, le=100_000)]
"""Steps are numbered from 1; ``$N`` in tool arguments refers to step N's output."""


class Step(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=False):
    """One node of the plan DAG.

    A *tool step* names ``tool`` and ``args`` and runs without a model call; an *agent
    step* gives an ``instruction`` to the role's model. Exactly one of the two is set.
    """

    id: StepId
    """Unique within the run; later plan rounds continue the numbering."""
    role: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{1,64}(?![\s\S])")]
    """The executor role that runs the step (``researcher``, ``coder`` ...)."""
    tool: str | None = None
    """For a tool step: the tool to call."""
    args: dict[str, Any] = {}
    """For a tool step: the tool's arguments; ``$N`` / ``${N}`` are replaced by step N's output."""
    instruction: str | None = None
    """For an agent step: what the role's model is asked to do."""
    tools: list[str] | None = None
    """For an agent step: tools it may use (intersected with the role's); None = the role's."""
    depends_on: list[StepId] = []
    """Steps whose outputs this step needs; ``$N`` references are added automatically."""
    review: bool = False
    """Send the output to the critic before it counts as done."""
    success_criteria: str = ""
    """What a correct output looks like, for the executor and the critic (a team with a
    critic has every step that states criteria reviewed against them)."""
    on_failure: Literal["replan", "abort", "continue"] = "replan"
    """When the step fails for good: ask for a new plan round, fail the whole run at once,
    or go on without it (what needs it does not run; the synthesizer is told)."""
    title: str = ""
    """A short label for progress views."""
    timeout: Annotated[float, msgspec.Meta(gt=0, le=86_400)] | None = None
    """Seconds one attempt may run once started (start-to-close); None uses the role's
    ``step_timeout`` or the team's ``[timeouts] step``."""


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    """A whole plan, as stored in run state and handed to the synthesizer."""

    steps: list[Step] = []
    """Steps in the order the planner emitted them."""
    round: int = 0
    """0 for the first plan, n for the n-th replan."""


class SavedPlan(msgspec.Struct, frozen=True, kw_only=True):
    """A plan kept to be run again (``plancast plan save``, ``plancast run --plan``).

    ``{{name}}`` anywhere in the goal or in a step's text is a parameter, filled when the
    plan is run (``--param name=value``).
    """

    goal: str
    """The goal the plan answers."""
    steps: list[Step]
    """The steps, run as the first plan with no planner model call."""
    source_run: str = ""
    """The run the plan was saved from, if any."""
    version: int = 1
    """The file format's version."""
