"""Hierarchical teams: a manager's steps are delegated to sub-teams, each a child run with
its own planner brief, executors and replan budget; the tree is followed from the root."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from rich.console import Console

from protocols import (
    ParentStep,
    PlanRejected,
    ReplanStarted,
    RunEvent,
    RunFailed,
    RunFinished,
    RunRequest,
    RunStarted,
    StepFailed,
    StepFinished,
    StepPlanned,
    StepStarted,
    child_run_id,
)
from runtime.bus import Bus
from runtime.cli import RunView
from runtime.client import RunNotAccepted, cancel, follow, follow_tree, submit
from runtime.config import Settings, TeamConfigError, team_from_dict
from runtime.models import plan_shape
from runtime.testing import RecordedRequest, Rule, Scenario, open_scripted_model_server
from runtime.tools import builtin_tools
from runtime.worker import open_deployment

from .harness import RUN_TIMEOUT, check_sequence, echo, finish, last_user_message, make_team
from .harness import plan_line as line

pytestmark = pytest.mark.anyio

TOOLS = ["echo", "math", "sleep"]
HIERARCHY: dict[str, Any] = {
    "planner": {"kind": "planner", "model": "scripted", "members": ["research", "writing"]},
    "research": {"kind": "team", "description": "finds facts", "members": ["searcher"],
                 "planner_prompt": "You lead the research desk.",
                 "synthesizer": "research_synth"},
    "research_synth": {"kind": "synthesizer", "model": "scripted"},
    "writing": {"kind": "team", "description": "writes reports", "members": ["writer"],
                "planner_prompt": "You lead the writing desk."},
    "searcher": {"description": "looks facts up", "tools": TOOLS, "tool_steps_only": True,
                 "concurrency": 4},
    "writer": {"description": "writes", "tools": TOOLS, "tool_steps_only": True},
}
MANAGER_PLAN = [line(1, role="research", instruction="find facts"),
                line(2, role="writing", instruction="write report", depends_on=[1])]
RESEARCH_PLAN = [echo(1, "fact A", role="searcher"), echo(2, "fact B", role="searcher")]
WRITING_PLAN = [echo(1, "report of facts", role="writer")]


def hierarchy_rules(research: Sequence[str] = RESEARCH_PLAN) -> list[Rule]:
    """Children are told apart by their goals (a step's instruction becomes its child's)."""
    return [
        Rule(role="planner", contains="Goal: find facts", lines=list(research)),
        Rule(role="planner", contains="Goal: write report", lines=WRITING_PLAN),
        Rule(role="planner", lines=MANAGER_PLAN),
        Rule(role="research_synth", contains="Goal: find facts",
             text=json.dumps({"action": "finish", "answer": "facts A and B"})),
        finish("a report", contains="Goal: write report"),
        finish("final answer"),
    ]


@dataclass
class Tree:
    root: str
    events: dict[str, list[RunEvent]] = field(default_factory=dict)
    order: list[tuple[str, RunEvent]] = field(default_factory=list)
    """Every event of the tree as it came."""
    requests: list[RecordedRequest] = field(default_factory=list)

    def of(self, run_id: str, kind: type[Any]) -> list[Any]:
        return [e for e in self.events[run_id] if isinstance(e, kind)]

    def last(self, run_id: str) -> RunEvent:
        return self.events[run_id][-1]


async def run_tree(nats_url: str, prefix: str, rules: Sequence[Rule], *,
                   roles: dict[str, Any] | None = None,
                   during: Callable[[Bus, str], Awaitable[None]] | None = None,
                   goal: str = "a report on agents", **policy: Any) -> Tree:
    """Run ``goal`` on a team with sub-teams; every run of the tree's events, checked."""
    async with open_scripted_model_server(Scenario(rules=list(rules))) as model:
        team = make_team(model.base_url, {**HIERARCHY, **(roles or {})}, **policy)
        config = Settings(nats_url=nats_url, prefix=prefix)
        async with open_deployment(config, team, builtin_tools(plugins=False)) as bus, \
                anyio.create_task_group() as tg:
            accepted = await submit(bus, RunRequest(goal=goal))
            tree = Tree(accepted.run_id)

            async def collect(run_id: str, event: RunEvent) -> None:
                tree.events.setdefault(run_id, []).append(event)
                tree.order.append((run_id, event))

            if during is not None:
                tg.start_soon(during, bus, accepted.run_id)
            with anyio.fail_after(RUN_TIMEOUT):
                await follow_tree(bus, accepted.run_id, collect, grace=10.0)
            tg.cancel_scope.cancel()
        tree.requests = list(model.requests)
    for events in tree.events.values():
        check_sequence(events)
    return tree


async def test_a_manager_with_two_sub_teams_finishes(nats_url: str, prefix: str) -> None:
    tree = await run_tree(nats_url, prefix, hierarchy_rules())
    root = tree.root
    assert isinstance(tree.last(root), RunFinished), tree.events[root]
    assert tree.last(root).answer == "final answer"  # type: ignore[union-attr]
    research, writing = child_run_id(root, 1, 1), child_run_id(root, 2, 1)
    assert set(tree.events) == {root, research, writing}
    started = {e.step_id: e.child_run for e in tree.of(root, StepStarted)}
    assert started == {1: research, 2: writing}
    # Each child says whose step it answers; the parent step finishes with its answer.
    first = tree.of(research, RunStarted)[0]
    assert first.parent == ParentStep(run_id=root, step_id=1, attempt=1, depth=1,
                                      role="research")
    outputs = {e.step_id: e.output for e in tree.of(root, StepFinished)}
    assert outputs == {1: "facts A and B", 2: "a report"}
    # Each child plans with its own members only, under its own brief.
    assert {e.step.role for e in tree.of(research, StepPlanned)} == {"searcher"}
    child_plans = [r for r in tree.requests if r.headers.get("x-plancast-role") == "planner"
                   and "Goal: find facts" in last_user_message(r)]
    assert len(child_plans) == 1
    prompt = last_user_message(child_plans[0])
    assert "- searcher:" in prompt and "- writer:" not in prompt and "- research:" not in prompt
    system = child_plans[0].body["messages"][0]["content"]
    assert "You lead the research desk." in system
    manager_plan = [r for r in tree.requests if "Goal: a report on agents"
                    in last_user_message(r) and r.headers.get("x-plancast-role") == "planner"]
    assert "- searcher:" not in last_user_message(manager_plan[0])  # the planner's members
    # research's own synthesizer joined its child run; the others went to any synthesizer.
    joins = [(r.headers.get("x-plancast-role"), "Goal: find facts" in last_user_message(r))
             for r in tree.requests if "synthesizer" in str(r.headers.get("x-plancast-role"))
             or r.headers.get("x-plancast-role") == "research_synth"]
    assert sorted(joins) == [("research_synth", True), ("synthesizer", False),
                             ("synthesizer", False)]
    # The parent's usage counts the whole tree's model calls.
    assert tree.last(root).usage.calls == len(tree.requests) == 6  # type: ignore[union-attr]
    # The watch view nests each child's steps under the step it does.
    view = RunView(root)
    for run_id, event in tree.order:
        view.apply_tree(run_id, event)
    console = Console(width=160, record=True)
    console.print(view.render(160))
    text = console.export_text()
    for number, role in (("1.1", "searcher"), ("1.2", "searcher"), ("2.1", "writer")):
        assert any(f" {number} " in ln and role in ln for ln in text.splitlines()), text
    assert view.children[research].outcome == tree.last(research)


async def test_model_calls_flat_against_hierarchical(nats_url: str, prefix: str) -> None:
    """The issue's exercise: the same three leaf steps, planned flat and as a hierarchy."""
    flat_rules = [Rule(role="planner", lines=[*RESEARCH_PLAN[:1], *RESEARCH_PLAN[1:],
                                              echo(3, "report of $1 $2", role="writer")]),
                  finish("final answer")]
    flat = await run_tree(nats_url, prefix, flat_rules,
                          roles={"planner": {"kind": "planner", "model": "scripted"}})
    tree = await run_tree(nats_url, prefix + "h", hierarchy_rules())
    assert isinstance(tree.last(tree.root), RunFinished)
    assert isinstance(flat.last(flat.root), RunFinished)
    # flat: 1 plan + 1 synthesis; hierarchy: (1 plan + 1 synthesis) per level-run, 3 runs
    assert (len(flat.requests), len(tree.requests)) == (2, 6)


async def test_a_child_replans_inside_its_own_budget(nats_url: str, prefix: str) -> None:
    failing = [echo(1, "fact A", role="searcher"),
               line(2, role="searcher", tool="math", args={"expression": "1/0"})]
    rules = [Rule(role="planner", contains="A new plan is needed",
                  lines=[echo(3, "fact B again", role="searcher")]),
             *hierarchy_rules(failing)]
    tree = await run_tree(nats_url, prefix, rules)
    root, research = tree.root, child_run_id(tree.root, 1, 1)
    assert isinstance(tree.last(root), RunFinished), tree.events[root]
    assert [e.step_id for e in tree.of(research, StepFailed) if not e.will_retry] == [2]
    assert len(tree.of(research, ReplanStarted)) == 1
    assert tree.of(root, ReplanStarted) == []  # the manager never replanned
    assert tree.of(root, StepFailed) == []


async def test_a_childs_plan_may_use_its_members_only(nats_url: str, prefix: str) -> None:
    """A child plan that gives a step to a role outside its team is rejected like any
    invalid plan, and written again."""
    outsider = Rule(role="planner", contains="Goal: find facts", times=1,
                    lines=[echo(1, "not mine", role="writer")])
    tree = await run_tree(nats_url, prefix, [outsider, *hierarchy_rules()])
    research = child_run_id(tree.root, 1, 1)
    rejected = tree.of(research, PlanRejected)
    assert len(rejected) == 1 and "unknown role 'writer'" in rejected[0].error, rejected
    assert "use one of: searcher" in rejected[0].error
    assert isinstance(tree.last(tree.root), RunFinished)


async def test_cancelling_the_parent_cancels_its_children(nats_url: str,
                                                          prefix: str) -> None:
    slow = [line(1, role="searcher", tool="sleep", args={"seconds": 8})]

    async def cancel_once_the_child_runs(bus: Bus, run_id: str) -> None:
        child = child_run_id(run_id, 1, 1)
        async for event in follow(bus, child):
            if isinstance(event, StepStarted):  # the sub-team's executor is at work
                await cancel(bus, run_id, "enough", source="test")
                return

    tree = await run_tree(nats_url, prefix, hierarchy_rules(slow),
                          during=cancel_once_the_child_runs)
    root, research = tree.root, child_run_id(tree.root, 1, 1)
    parent_end, child_end = tree.last(root), tree.last(research)
    assert isinstance(parent_end, RunFailed) and parent_end.cause == "cancelled"
    assert isinstance(child_end, RunFailed) and child_end.cause == "cancelled", \
        tree.events[research]
    assert f"run {root}" in child_end.reason  # who cancelled it


async def test_depth_is_bounded_and_a_childs_failure_fails_the_parent_step(
        nats_url: str, prefix: str) -> None:
    """research's member is another team; at max_team_depth = 1 its step cannot start a
    grandchild: the child fails (no replans left), which fails the manager's step, and the
    manager replans as for any failed step."""
    roles = {"research": {**HIERARCHY["research"], "members": ["searcher", "deep"],
                          "max_replans": 0},
             "deep": {"kind": "team", "members": ["searcher"]}}
    deeper = [line(1, role="deep", instruction="dig deeper")]
    rules = [Rule(role="planner", contains="A new plan is needed",
                  lines=[echo(3, "fallback facts", role="writer")]),
             *hierarchy_rules(deeper)]
    roles["planner"] = {**HIERARCHY["planner"], "members": ["research", "writing", "writer"]}
    tree = await run_tree(nats_url, prefix, rules, roles=roles, max_team_depth=1)
    root, research = tree.root, child_run_id(tree.root, 1, 1)
    failed = tree.of(research, StepFailed)
    assert failed and "past max_team_depth = 1" in failed[0].error
    assert not failed[0].will_retry
    assert child_run_id(research, 1, 1) not in tree.events  # no grandchild was started
    assert isinstance(tree.last(research), RunFailed)
    parent_failed = tree.of(root, StepFailed)
    assert [e.step_id for e in parent_failed] == [1]
    assert f"sub-team's run {research} failed" in parent_failed[0].error
    assert len(tree.of(root, ReplanStarted)) == 1
    assert isinstance(tree.last(root), RunFinished), tree.events[root]


async def test_the_team_lead_keeps_a_long_step_alive(nats_url: str, prefix: str) -> None:
    """The child works for longer than the heartbeat timeout: the team lead's heartbeats
    list the parent's step, so the parent waits for the child's answer."""
    slow = [line(1, role="searcher", tool="sleep", args={"seconds": 4})]
    tree = await run_tree(nats_url, prefix, hierarchy_rules(slow), timeouts={"heartbeat": 2.5})
    root = tree.root
    assert isinstance(tree.last(root), RunFinished), tree.events[root]
    assert tree.of(root, StepFailed) == [] and tree.of(root, ReplanStarted) == []


async def test_a_sub_team_past_its_steps_time_fails_the_step_and_ends(
        nats_url: str, prefix: str) -> None:
    """The child's deadline is inside the step's timeout: it ends with its reason, the
    parent step fails (and is replanned), nothing waits on."""
    slow = [line(1, role="searcher", tool="sleep", args={"seconds": 8})]
    roles = {"research": {**HIERARCHY["research"], "step_timeout": 3.0},
             "planner": {**HIERARCHY["planner"], "members": ["research", "writing", "writer"]}}
    rules = [Rule(role="planner", contains="A new plan is needed",
                  lines=[echo(3, "without research", role="writer")]),
             *hierarchy_rules(slow)]
    tree = await run_tree(nats_url, prefix, rules, roles=roles)
    root, research = tree.root, child_run_id(tree.root, 1, 1)
    child_end = tree.last(research)
    assert isinstance(child_end, RunFailed) and child_end.cause == "deadline", child_end
    failed = tree.of(root, StepFailed)
    assert [e.step_id for e in failed] == [1], failed
    assert f"the sub-team's run {research} failed (deadline)" in failed[0].error, failed
    assert not failed[0].will_retry  # the child had its budget
    assert isinstance(tree.last(root), RunFinished), tree.events[root]


@pytest.mark.parametrize(("fields", "reason"), [
    ({"roles": ["ghost"]}, "has no executor role of"),
    ({"roles": []}, "may use no role at all"),
    ({"synthesizer": "searcher"}, "no synthesizer role of"),
    ({"parent": ParentStep(run_id="run-x", step_id=1, depth=3)}, "past max_team_depth = 2"),
])
async def test_a_planner_refuses_a_sub_team_request_it_cannot_serve(
        nats_url: str, prefix: str, fields: dict[str, Any], reason: str) -> None:
    async with open_scripted_model_server(Scenario(rules=hierarchy_rules())) as model:
        team = make_team(model.base_url, HIERARCHY)
        async with open_deployment(Settings(nats_url=nats_url, prefix=prefix), team,
                                   builtin_tools(plugins=False), roles=["planner"]) as bus:
            with pytest.raises(RunNotAccepted, match=reason):
                await submit(bus, RunRequest(goal="g", **fields))


def test_team_roles_are_checked_at_start_up() -> None:
    data: dict[str, Any] = {
        "models": {"m": {"model": "x"}},
        "roles": {
            "planner": {"kind": "planner", "model": "m", "members": ["ghost"]},
            "synthesizer": {"kind": "synthesizer", "model": "m"},
            "solo": {"kind": "team"},
            "loop": {"kind": "team", "members": ["loop", "synthesizer"], "tools": ["echo"],
                     "synthesizer": "worker"},
            "worker": {"tools": ["echo"], "tool_steps_only": True, "planner_prompt": "x"},
        },
    }
    with pytest.raises(TeamConfigError) as caught:
        team_from_dict(data, source="t.toml")
    lines = str(caught.value).splitlines()
    assert all(ln.startswith("t.toml: roles.") for ln in lines), lines
    text = str(caught.value)
    for needle in ("no role 'ghost'", "roles.solo: a team role needs members",
                   "cannot be its own member", "'synthesizer' is a synthesizer",
                   "runs no tools itself", "roles.worker.planner_prompt: only a role of kind",
                   "roles.loop.synthesizer: 'worker' is not a synthesizer role"):
        assert needle in text, text
    assert len(lines) == 7


def test_a_plan_constraint_offers_sub_teams_and_only_a_child_runs_members() -> None:
    """Under a constraint (grammar, JSON schema) a manager can still give steps to a team
    role (no model of its own: it takes instructions), and a child run's plan only to its
    members."""
    team = team_from_dict({
        "models": {"m": {"model": "m", "base_url": "http://127.0.0.1:9/v1"}},
        "roles": {
            "planner": {"kind": "planner", "model": "m"},
            "calc": {"description": "x", "tools": ["math"], "tool_steps_only": True},
            "writer": {"description": "x", "model": "m"},
            "squad": {"kind": "team", "description": "x", "members": ["calc"]},
            "synthesizer": {"kind": "synthesizer", "model": "m"},
        }})
    tools = builtin_tools(plugins=False)
    manager = plan_shape(team, tools, first_id=1, prior=[], max_steps=4)
    assert manager is not None
    assert {(r.name, r.agent) for r in manager.roles} == {
        ("calc", False), ("writer", True), ("squad", True)}
    child = plan_shape(team, tools, first_id=1, prior=[], max_steps=4,
                       allowed=[team.roles["calc"]])
    assert child is not None and [r.name for r in child.roles] == ["calc"]
