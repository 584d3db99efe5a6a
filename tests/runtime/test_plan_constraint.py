"""The plan grammar admits only plans the scheduler accepts, and refuses the usual mistakes.

The grammar is read back from its text (``gbnf_check``), as a server would read it; every
string hypothesis draws from it must decode, line by line, into steps the scheduler and
the planner's role/tool check accept, with consecutive ids from the first id.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocols import Step
from runtime.config import team_from_dict
from runtime.dag import Scheduler, StepState
from runtime.models import MAX_CONSTRAINED_STEPS, PlanShape, RoleTools, plan_grammar, plan_shape
from runtime.tools import builtin_tools

from .gbnf_check import Rules, parse_gbnf

TOOLS = builtin_tools(plugins=False)
SCHEMAS: dict[str, dict[str, Any] | None] = {
    "echo": TOOLS.get("echo").parameters, "math": TOOLS.get("math").parameters,
    "python": TOOLS.get("python").parameters, "sleep": TOOLS.get("sleep").parameters,
    "remote": None,  # lives on the workers only: any object
    "nested": {"type": "object", "properties": {
        "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
        "mode": {"enum": ["a", "b $1"]}, "n": {"type": ["integer", "null"]}},
        "required": ["items"], "$defs": {"Item": {"type": "object", "properties": {
            "label": {"type": "string"}, "flag": {"type": "boolean"}},
            "required": ["label"]}}},
}


@st.composite
def shapes(draw: st.DrawFn) -> PlanShape:
    first = draw(st.integers(1, 30))
    prior = draw(st.sets(st.integers(1, first - 1), max_size=5)) if first > 1 else set()
    names = draw(st.lists(st.sampled_from(["worker", "writer", "r_2", "Coder-X"]), min_size=1,
                          max_size=3, unique=True))
    roles = []
    for name in names:
        tools = draw(st.lists(st.sampled_from(sorted(SCHEMAS)), max_size=3, unique=True))
        agent = draw(st.booleans()) or not tools
        roles.append(RoleTools(name, tuple(tools), agent))
    return PlanShape(first_id=first, prior=tuple(sorted(prior)), roles=tuple(roles),
                     schemas=SCHEMAS, max_steps=draw(st.integers(1, 4)))


def scheduler_for(shape: PlanShape) -> Scheduler:
    """A scheduler in round 1 whose done steps are ``prior``; other earlier ids were dropped."""
    done = [(Step(id=p, role=shape.roles[0].name, instruction="x"), 0, StepState.DONE, 1, "out")
            for p in shape.prior]
    return Scheduler.restore(
        known_roles=[r.name for r in shape.roles], known_tools=list(SCHEMAS),
        max_steps=shape.max_steps, round=1, closed=False, steps=done,
        dropped=set(range(1, shape.first_id)) - set(shape.prior))


def accept(shape: PlanShape, text: str) -> list[Step]:
    """Feed a plan as the planner does; raises where the scheduler or the role check would."""
    scheduler = scheduler_for(shape)
    roles = {r.name: r for r in shape.roles}
    assert text.endswith("\n") or not text
    steps = [msgspec.json.decode(line, type=Step) for line in text.splitlines()]
    for step in steps:
        role = roles[step.role]
        if step.tool is not None:
            assert step.tool in role.tools, f"{step.role} may not use {step.tool}"
            _check_args(step.args, SCHEMAS[step.tool])
        else:
            assert role.agent, f"{step.role} takes no agent steps"
            assert set(step.tools or ()) <= set(role.tools)
        assert step.depends_on == sorted(set(step.depends_on)), "distinct and ascending"
        scheduler.add(step)
    scheduler.close_plan()
    assert [s.id for s in steps] == list(shape.ids())[:len(steps)]
    return steps


def _check_args(args: dict[str, Any], schema: dict[str, Any] | None) -> None:
    if schema is None:
        return
    assert set(schema.get("required", ())) <= args.keys() <= schema["properties"].keys()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=shapes(), data=st.data())
def test_every_plan_the_grammar_admits_is_accepted(shape: PlanShape, data: st.DataObject) -> None:
    rules = parse_gbnf(plan_grammar(shape))
    text = rules.draw(data)
    steps = accept(shape, text)
    assert 1 <= len(steps) <= shape.max_steps
    assert rules.matches(text)  # the reader and the sampler agree


@pytest.fixture(scope="module")
def replan() -> Rules:
    """Round 1 of a run: steps 1 and 3 done, 2 dropped; the new plan starts at 4."""
    shape = PlanShape(first_id=4, prior=(1, 3), schemas=SCHEMAS, max_steps=3, roles=(
        RoleTools("worker", ("echo", "math"), agent=False),
        RoleTools("writer", ("python",), agent=True)))
    return parse_gbnf(plan_grammar(shape))


GOOD = [
    '{"id": 4, "role": "worker", "tool": "echo", "args": {"text": "$1 and ${3}"}}\n',
    '{"id":4,"role":"writer","title":"t","depends_on":[1, 3],"instruction":"go","tools":'
    '["python"],"review":true,"success_criteria":"ok"}\n',
    '{"id": 4, "role": "worker", "tool": "math", "args": {"expression": "$3 * 2"}}\n'
    '{"id": 5, "role": "writer", "depends_on": [4], "instruction": "use $4 and $100"}\n'
    '{"id": 6, "role": "writer", "tool": "python", "args": {"code": "print($5)", '
    '"timeout": 2.5}}\n',
    '{"id": 4, "role": "worker", "tool": "echo", "args": {"text": "costs $ 5, $x, $"}}\n',
    '{"id": 4, "role": "worker", "tool": "echo", "args": {"text": "a"}}\n'
    '{"id": 5, "role": "writer", "depends_on": [3, 4], "instruction": "b"}\n'
    '{"id": 6, "role": "writer", "depends_on": [1,5], "instruction": "c"}\n',
]


@pytest.mark.parametrize("plan", GOOD)
def test_the_grammar_admits_well_formed_plans(replan: Rules, plan: str) -> None:
    assert replan.matches(plan), plan


BAD = {
    "starts at 1": '{"id": 1, "role": "worker", "tool": "echo", "args": {"text": "a"}}\n',
    "skips an id": '{"id": 4, "role": "worker", "tool": "echo", "args": {"text": "a"}}\n'
                   '{"id": 6, "role": "worker", "tool": "echo", "args": {"text": "b"}}\n',
    "depends on a dropped step": '{"id": 4, "role": "writer", "depends_on": [2], '
                                 '"instruction": "go"}\n',
    "depends on itself": '{"id": 4, "role": "writer", "depends_on": [4], "instruction": "go"}\n',
    "repeats a dependency": '{"id": 4, "role": "writer", "depends_on": [1, 1], '
                            '"instruction": "go"}\n',
    "lists dependencies out of order": '{"id": 4, "role": "writer", "depends_on": [3, 1], '
                                       '"instruction": "go"}\n',
    "refers to a later step": '{"id": 4, "role": "worker", "tool": "echo", '
                              '"args": {"text": "$5"}}\n',
    "refers to a dropped step": '{"id": 4, "role": "worker", "tool": "echo", '
                                '"args": {"text": "${2}"}}\n',
    "a tool of another role": '{"id": 4, "role": "worker", "tool": "python", '
                              '"args": {"code": "1"}}\n',
    "an unknown role": '{"id": 4, "role": "boss", "instruction": "go"}\n',
    "an agent step for a tool-only role": '{"id": 4, "role": "worker", "instruction": "go"}\n',
    "a blank instruction": '{"id": 4, "role": "writer", "instruction": " \\n "}\n',
    "an agent tool the role lacks": '{"id": 4, "role": "writer", "instruction": "go", '
                                    '"tools": ["echo"]}\n',
    "args missing a required key": '{"id": 4, "role": "worker", "tool": "echo", "args": {}}\n',
    "args of the wrong type": '{"id": 4, "role": "worker", "tool": "echo", '
                              '"args": {"text": 5}}\n',
    "too many steps": "".join(
        f'{{"id": {i}, "role": "worker", "tool": "echo", "args": {{"text": "a"}}}}\n'
        for i in range(4, 8)),
    "a title past 80 characters": '{"id": 4, "role": "writer", "title": "' + "t" * 81
                                  + '", "instruction": "go"}\n',
    "an instruction that starts blank": '{"id": 4, "role": "writer", "instruction": " go"}\n',
    "a number no float holds": '{"id": 4, "role": "writer", "tool": "python", '
                               '"args": {"code": "1", "timeout": 1e999}}\n',
    "a code fence": '```json\n{"id": 4, "role": "writer", "instruction": "go"}\n```\n',
    "prose": "Here is the plan:\n",
    "no steps": "",
    "an escaped reference": '{"id": 4, "role": "worker", "tool": "echo", '
                            '"args": {"text": "\\u00245"}}\n',
}


@pytest.mark.parametrize("mistake", sorted(BAD))
def test_the_grammar_refuses(replan: Rules, mistake: str) -> None:
    assert not replan.matches(BAD[mistake]), mistake


def test_a_round_with_accepted_steps_may_add_none() -> None:
    shape = PlanShape(first_id=3, prior=(1, 2), roles=(RoleTools("w", (), True),), min_steps=0)
    assert parse_gbnf(plan_grammar(shape)).matches("")


def test_the_shape_follows_the_team() -> None:
    team = team_from_dict({"models": {"m": {"model": "x", "base_url": "http://127.0.0.1:9/v1"}},
                           "roles": {
        "planner": {"kind": "planner", "model": "m"},
        "worker": {"tools": ["echo", "remote"], "tool_steps_only": True},
        "writer": {"model": "m"},
        "idle": {"tool_steps_only": True},  # no tools, no model: can take no step
        "synthesizer": {"kind": "synthesizer", "model": "m"}}})
    shape = plan_shape(team, TOOLS, first_id=7, prior=[5, 1, 5], max_steps=200)
    assert shape is not None
    assert shape.roles == (RoleTools("worker", ("echo", "remote"), False),
                           RoleTools("writer", (), True))
    assert shape.prior == (1, 5)
    assert shape.schemas["remote"] is None and shape.schemas["echo"] == SCHEMAS["echo"]
    assert shape.count == MAX_CONSTRAINED_STEPS
    assert plan_shape(team, TOOLS, first_id=7, prior=[], max_steps=0) is None
