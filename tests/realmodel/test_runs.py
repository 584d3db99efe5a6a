"""Goals end to end on a real model: SmolLM2-135M on llama.cpp in every role, with the plan
constraint of the example team (``structured = "grammar"``).

A 135M model's prose is poor, so these check the runtime, not the answers: the first
plan is valid on the first attempt, the run finishes, the steps name only the team's
role/tool pairs, tool results are right for the arguments the model wrote, a replan's plan
is valid and continues the ids, and every model call counts tokens.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from benchmarks.local_model import arithmetic
from protocols import (
    PlanFinished,
    PlanRejected,
    ReplanStarted,
    RunEvent,
    RunFailed,
    RunFinished,
    StepFailed,
    StepFinished,
    StepPlanned,
    UsageRecorded,
)
from runtime.config import TeamConfig
from runtime.models import LlamaServer

from .conftest import file_role, local_team, run_goal

pytestmark = [pytest.mark.realmodel, pytest.mark.anyio, pytest.mark.timeout(600)]

MAX_STEPS = 4
"""Steps one plan may have (the grammar ends the plan there): a 135M model does not stop
writing steps by itself (it wrote 18 for a one-step goal until its max_tokens)."""

def of(events: list[RunEvent], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def check_steps_allowed(events: list[RunEvent], team: TeamConfig) -> None:
    for planned in of(events, StepPlanned):
        step = planned.step
        role = team.roles[step.role]  # a role of the team
        assert role in team.executors(), step
        assert step.tool is None or step.tool in role.tools, step


def check_usage(events: list[RunEvent]) -> None:
    """Every model call counted, none with 0 tokens (llama.cpp sends no usage in streams:
    the planner's are estimated)."""
    recorded = of(events, UsageRecorded)
    assert recorded and all(e.usage.calls >= 1 for e in recorded)
    assert all(e.usage.prompt_tokens > 0 and e.usage.completion_tokens > 0 for e in recorded)
    assert any(e.source == "planner" for e in recorded)
    last = events[-1]
    assert isinstance(last, RunFinished | RunFailed)
    assert last.usage.calls == sum(e.usage.calls for e in recorded)


async def test_a_goal_finishes_end_to_end_with_a_valid_first_plan(
    local_model: LlamaServer, nats_url: str, prefix: str
) -> None:
    """Only steps nothing can fail (the example's writer: its model, its echo tool), so the
    run must finish, whatever the model writes."""
    team = local_team(local_model.base_url, roles={"writer": file_role("writer")})
    events = await run_goal(nats_url, prefix, team, "Write one short sentence about the sea.",
                            max_replans=1, max_steps=MAX_STEPS)
    assert of(events, PlanRejected) == [], "the constrained plan must be valid at once"
    planned = [e.step.id for e in of(events, StepPlanned)]
    assert planned == list(range(1, len(planned) + 1))
    check_steps_allowed(events, team)
    assert isinstance(events[-1], RunFinished), events[-1]
    check_usage(events)


async def test_math_results_are_right_for_the_expressions_the_model_wrote(
    local_model: LlamaServer, nats_url: str, prefix: str
) -> None:
    """The model's expressions may be nonsense: each math step's result (or refusal) must be
    what an independent evaluation of its expression gives; the plans stay valid."""
    team = local_team(local_model.base_url)
    events = await run_goal(nats_url, prefix, team, "Compute (17 + 25) * 3 with the math tool.",
                            max_replans=1, max_steps=MAX_STEPS)
    assert of(events, PlanRejected) == [], "the constrained plans must be valid at once"
    check_steps_allowed(events, team)
    last = events[-1]
    assert isinstance(last, RunFinished) or (isinstance(last, RunFailed)
                                              and last.stage != "plan"), last
    outputs = {e.step_id: e.output for e in of(events, StepFinished)}
    refused = {e.step_id: e.error for e in of(events, StepFailed)}
    math = [e.step for e in of(events, StepPlanned) if e.step.tool == "math"]
    assert math, "a goal that names the math tool gets math steps"
    for step in math:
        expression = str(step.args.get("expression", ""))
        expected = arithmetic(expression) if "$" not in expression else None
        if step.id in outputs and expected is not None:
            assert float(outputs[step.id]) == pytest.approx(expected), (step, outputs[step.id])
        elif step.id in refused and expected is not None:  # only the tool's own limits
            assert re.search(r"too large|longer than|too deeply", refused[step.id]), (
                step, refused[step.id])
    check_usage(events)


async def test_a_replan_writes_a_valid_plan_that_continues_the_ids(
    local_model: LlamaServer, nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """Every step fails (the only executor reads files from an empty directory), so the run
    replans: the new round's plan is valid at once and starts after the first round's ids."""
    reader = {"description": "reads a text file with the read_file tool",
              "tools": ["read_file"], "tool_steps_only": True}
    team = local_team(local_model.base_url, roles={"reader": reader},
                      files_root=str(tmp_path), step_attempts=1)
    events = await run_goal(nats_url, prefix, team,
                            "Read the file notes.txt with the read_file tool.", max_replans=1,
                            max_steps=MAX_STEPS)
    assert of(events, PlanRejected) == []
    assert len(of(events, ReplanStarted)) == 1
    rounds = {e.round: e for e in of(events, PlanFinished)}
    assert set(rounds) == {0, 1}
    first = [e.step.id for e in of(events, StepPlanned) if e.round == 0]
    again = [e.step.id for e in of(events, StepPlanned) if e.round == 1]
    assert first == list(range(1, len(first) + 1))
    assert again == list(range(len(first) + 1, len(first) + len(again) + 1)), (first, again)
    check_steps_allowed(events, team)
    assert isinstance(events[-1], RunFinished | RunFailed)
    if isinstance(events[-1], RunFailed):
        assert events[-1].stage != "plan", events[-1]
    check_usage(events)
