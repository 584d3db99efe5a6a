"""Reusable plans: the plan that answered a run, saved from its events and run again with
no planner model call; filled with parameters; refused when the team cannot run it."""

from __future__ import annotations

import anyio
import msgspec
import pytest

from actors.run import GIVEN_PLAN
from protocols import (
    PlanStarted,
    RunEvent,
    RunFinished,
    RunRequest,
    SavedPlan,
    StepFinished,
    StepPlanned,
)
from runtime.bus import Bus
from runtime.client import (
    PlanFileError,
    RunNotAccepted,
    dump,
    fill,
    follow,
    parameters,
    parse_params,
    plan_of_run,
    submit,
)
from runtime.config import Settings
from runtime.testing import RecordedRequest, Rule, Scenario, open_scripted_model_server
from runtime.tools import builtin_tools
from runtime.worker import open_deployment

from .harness import RUN_TIMEOUT, check_sequence, echo, finish, make_team, plan_line

pytestmark = pytest.mark.anyio

# Round 0 writes a step that fails (1/0); the replan replaces it with step 3.
FIRST_PLAN = [echo(1, "alpha"), plan_line(2, tool="math", args={"expression": "1/0"})]
REPLAN = [echo(3, "$1 beta")]
RULES = [
    Rule(role="planner", contains="A new plan is needed", lines=REPLAN),
    Rule(role="planner", lines=FIRST_PLAN),
    finish("done"),
]


async def _run(bus: Bus, request: RunRequest) -> list[RunEvent]:
    accepted = await submit(bus, request)
    with anyio.fail_after(RUN_TIMEOUT):
        events = [e async for e in follow(bus, accepted.run_id)]
    check_sequence(events)
    return events


def _outputs(events: list[RunEvent]) -> dict[int, str]:
    return {e.step_id: e.output for e in events if isinstance(e, StepFinished)}


def _saved(goal: str, *lines: str) -> SavedPlan:
    return msgspec.json.decode(f'{{"goal": {msgspec.json.encode(goal).decode()}, '
                               f'"steps": [{",".join(lines)}]}}', type=SavedPlan)


def _planner_calls(requests: list[RecordedRequest]) -> int:
    return sum(r.headers.get("x-plancast-role") == "planner" for r in requests)


async def test_a_saved_plan_reruns_with_no_planner_call_and_the_same_results(
    nats_url: str, prefix: str
) -> None:
    """The saved plan keeps what finished across rounds (the replan's fix, not the failed
    first try), and a run of it asks the planner's model nothing."""
    async with open_scripted_model_server(Scenario(rules=RULES)) as model:
        settings = Settings(nats_url=nats_url, prefix=prefix)
        async with open_deployment(settings, make_team(model.base_url),
                                   builtin_tools(plugins=False)) as bus:
            first = await _run(bus, RunRequest(goal="alpha beta"))
            assert isinstance(first[-1], RunFinished)
            saved = await plan_of_run(bus, first[0].run_id)
            calls_before = _planner_calls(list(model.requests))
            again = await _run(bus, RunRequest(goal=saved.goal, plan=saved.steps))
            calls_after = _planner_calls(list(model.requests))

    assert calls_before == 2 and calls_after == calls_before  # the rerun asked no planner
    assert saved.goal == "alpha beta" and saved.source_run == first[0].run_id
    assert [s.id for s in saved.steps] == [1, 3]
    assert saved.steps[1].depends_on == [1]  # $1 counts as a dependency
    assert isinstance(again[-1], RunFinished) and again[-1].answer == "done"
    assert _outputs(again) == {1: "alpha", 3: "alpha beta"}
    assert _outputs(again) == {k: v for k, v in _outputs(first).items() if k in (1, 3)}
    [started] = [e for e in again if isinstance(e, PlanStarted)]
    assert started.model == GIVEN_PLAN
    # The file format round-trips.
    assert msgspec.json.decode(dump(saved), type=SavedPlan) == saved


async def test_a_parameterised_plan_runs_with_two_parameter_sets(
    nats_url: str, prefix: str
) -> None:
    plan = _saved("greet {{name}}", echo(1, "hello {{name}}"), echo(2, "$1 from {{ place }}"))
    assert parameters(plan) == {"name", "place"}
    outputs = []
    async with open_scripted_model_server(Scenario(rules=[finish("ok")])) as model:
        settings = Settings(nats_url=nats_url, prefix=prefix)
        async with open_deployment(settings, make_team(model.base_url),
                                   builtin_tools(plugins=False)) as bus:
            for params in (["name=ada", "place=london"], ["name=bob", "place=paris"]):
                filled = fill(plan, parse_params(params))
                events = await _run(bus, RunRequest(goal=filled.goal, plan=filled.steps))
                assert isinstance(events[-1], RunFinished)
                outputs.append((events[0].goal, _outputs(events)))  # type: ignore[attr-defined]
            assert _planner_calls(list(model.requests)) == 0
    assert outputs == [("greet ada", {1: "hello ada", 2: "hello ada from london"}),
                       ("greet bob", {1: "hello bob", 2: "hello bob from paris"})]


def test_filling_says_which_parameter_is_missing_or_unknown() -> None:
    plan = SavedPlan(goal="deploy {{service}}", steps=[])
    with pytest.raises(PlanFileError, match=r"--param service=VALUE"):
        fill(plan, {})
    with pytest.raises(PlanFileError, match=r"no parameter colour; its parameters: service"):
        fill(plan, {"service": "auth", "colour": "red"})
    with pytest.raises(PlanFileError, match=r"NAME=VALUE"):
        parse_params(["service"])


@pytest.mark.parametrize(("step", "says"), [
    (plan_line(1, role="ghost", tool="echo", args={"text": "x"}), "unknown role 'ghost'"),
    (plan_line(1, tool="teleport", args={}), "unknown tool 'teleport'"),
    (plan_line(1, role="scribe", tool="echo", args={"text": "x"}),
     "role 'scribe' may not use tool 'echo'"),
    (echo(1, "$4"), "never declares step 4"),
])
async def test_a_plan_the_team_cannot_run_is_refused_at_submit(
    nats_url: str, prefix: str, step: str, says: str
) -> None:
    """A saved plan whose roles or tools no longer exist is refused with the reason, and
    nothing of it runs."""
    scribe = {"scribe": {"description": "writes", "model": "scripted"}}
    async with open_scripted_model_server(Scenario(rules=[finish("ok")])) as model:
        settings = Settings(nats_url=nats_url, prefix=prefix)
        async with open_deployment(settings, make_team(model.base_url, scribe),
                                   builtin_tools(plugins=False)) as bus:
            request = RunRequest(goal="x", plan=_saved("x", step).steps)
            with pytest.raises(RunNotAccepted, match="the given plan cannot run") as refused:
                await submit(bus, request)
    assert says in str(refused.value)


async def test_steps_planned_from_a_given_plan_are_the_plan(nats_url: str, prefix: str) -> None:
    plan = _saved("ab", echo(1, "a"), echo(2, "b"), echo(3, "$1$2")).steps
    async with open_scripted_model_server(Scenario(rules=[finish("ok")])) as model:
        settings = Settings(nats_url=nats_url, prefix=prefix)
        async with open_deployment(settings, make_team(model.base_url),
                                   builtin_tools(plugins=False)) as bus:
            events = await _run(bus, RunRequest(goal="ab", plan=plan))
    planned = [e.step for e in events if isinstance(e, StepPlanned)]
    assert [s.id for s in planned] == [1, 2, 3] and planned[2].depends_on == [1, 2]
    assert _outputs(events)[3] == "ab"
