"""The scheduler: validation on arrival, event-driven readiness, $N substitution, replans."""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols import Step
from runtime.dag import PlanValidationError, Scheduler, StepState, StepStateError

ROLES = ("researcher", "coder")
TOOLS = ("search", "python")


def make(max_steps: int = 50, finished: dict[int, str] | None = None) -> Scheduler:
    return Scheduler(known_roles=ROLES, known_tools=TOOLS, max_steps=max_steps, finished=finished)


def agent(sid: int, *deps: int, role: str = "researcher") -> Step:
    return Step(id=sid, role=role, instruction=f"do {sid}", depends_on=list(deps))


def tool(sid: int, args: dict[str, Any], *deps: int, name: str = "search") -> Step:
    return Step(id=sid, role="coder", tool=name, args=args, depends_on=list(deps))


def ids(steps: list[Step]) -> list[int]:
    return [s.id for s in steps]


def snapshot(s: Scheduler) -> object:
    """Everything observable, to check that a rejected step changed nothing."""
    states = {step.id: (s.state(step.id), s.attempt(step.id)) for step in s.steps}
    return (s.steps, states, s.results, s.failures, ids(s.ready()), s.blocked(), s.closed)


# -- random DAGs ---------------------------------------------------------------------------


@st.composite
def dags(draw: st.DrawFn) -> tuple[list[Step], dict[int, set[int]]]:
    """A random DAG (edges from lower to higher index), random ids, random emission order.

    Some dependencies are written as ``$N`` in tool args instead of ``depends_on``.
    """
    n = draw(st.integers(1, 20))
    id_of = draw(st.permutations(range(1, n + 1)))
    deps: dict[int, set[int]] = {}
    steps = []
    for i in range(n):
        mine = draw(st.sets(st.integers(0, i - 1), max_size=4)) if i else set()
        as_ref = draw(st.sets(st.sampled_from(sorted(mine)))) if mine else set()
        sid = id_of[i]
        deps[sid] = {id_of[j] for j in mine}
        listed = sorted(id_of[j] for j in mine - as_ref)
        if as_ref:
            args = {"q": [f"${{{id_of[j]}}}x $" + str(id_of[j]) for j in sorted(as_ref)]}
            steps.append(tool(sid, args, *listed))
        else:
            steps.append(agent(sid, *listed))
    order = draw(st.permutations(steps))
    return order, deps


@settings(max_examples=150, deadline=None)
@given(dags(), st.data())
def test_random_dags_run_each_step_exactly_when_its_last_dependency_finishes(
    dag: tuple[list[Step], dict[int, set[int]]], data: st.DataObject
) -> None:
    order, deps = dag
    s = make()
    to_add = list(order)
    added: set[int] = set()
    done: set[int] = set()
    reported: set[int] = set()  # every id ever returned as ready
    running: set[int] = set()

    def check(newly: list[Step], finished: int | None) -> None:
        for step in newly:
            assert step.id not in reported, "a step became ready twice"
            assert deps[step.id] <= done, "ready before all its dependencies were done"
            # the event that made it ready is its last missing dependency (or its own add)
            assert finished is None or finished in deps[step.id]
        reported.update(ids(newly))
        expected = {sid for sid in added if deps[sid] <= done}
        assert reported == expected, "a step whose dependencies are done is not ready"
        assert set(ids(s.ready())) == reported - done - running

    while to_add or s.ready() or running:
        choices = ["add"] if to_add else []
        choices += ["start"] if s.ready() else []
        choices += ["complete"] if running else []
        match data.draw(st.sampled_from(choices)):
            case "add":
                step = to_add.pop(0)
                added.add(step.id)
                check(s.add(step), None)
                if not to_add:
                    s.close_plan()
            case "start":
                step = data.draw(st.sampled_from(s.ready()))
                s.start(step.id)
                running.add(step.id)
            case "complete":
                sid = data.draw(st.sampled_from(sorted(running)))
                assert s.state(sid) is StepState.RUNNING
                running.remove(sid)
                done.add(sid)
                check(s.complete(sid, f"out{sid}"), sid)
        assert not s.is_done() or not (to_add or running)

    assert s.is_done()
    assert done == set(deps)
    assert s.results == {sid: f"out{sid}" for sid in deps}
    assert ids(s.steps) == ids(order)


@settings(max_examples=100, deadline=None)
@given(dags(), st.data())
def test_failed_steps_block_exactly_their_descendants(
    dag: tuple[list[Step], dict[int, set[int]]], data: st.DataObject
) -> None:
    order, deps = dag
    s = make()
    for step in order:
        s.add(step)
    s.close_plan()
    failed: set[int] = set()
    while s.ready():
        step = data.draw(st.sampled_from(s.ready()))
        if data.draw(st.booleans()):
            s.fail(step.id, "boom")
            failed.add(step.id)
        else:
            s.complete(step.id, "ok")

    def descends_from_failure(sid: int) -> bool:
        return any(d in failed or descends_from_failure(d) for d in deps[sid])

    assert s.is_done()
    assert set(s.failures) == failed
    assert set(s.blocked()) == {sid for sid in deps if descends_from_failure(sid)}
    assert set(s.results) | failed | set(s.blocked()) == set(deps)


# -- bad plans -----------------------------------------------------------------------------


def rejected(s: Scheduler, step: Step, *words: str) -> None:
    """``step`` is refused with a message containing ``words``, and nothing changes."""
    before = snapshot(s)
    with pytest.raises(PlanValidationError) as info:
        s.add(step)
    for word in words:
        assert word in str(info.value)
    assert info.value.step_id == step.id
    assert snapshot(s) == before


@pytest.fixture
def started() -> Scheduler:
    """A plan in progress: 1 done, 2 running, 3 pending on 2, 4 waits for step 9 (not yet)."""
    s = make(max_steps=5)
    s.add(agent(1))
    s.add(agent(2))
    s.add(agent(3, 2))
    s.add(agent(4, 9))
    s.start(1)
    s.complete(1, "one")
    s.start(2)
    return s


def test_duplicate_id(started: Scheduler) -> None:
    rejected(started, agent(3), "id 3 is already used", "next: 5")


def test_both_tool_and_instruction(started: Scheduler) -> None:
    both = Step(id=5, role="coder", tool="search", instruction="and think")
    rejected(started, both, "both `tool` and `instruction`", "set exactly one")


def test_neither_tool_nor_instruction(started: Scheduler) -> None:
    rejected(started, Step(id=5, role="coder"), "neither `tool` nor `instruction`")
    rejected(started, Step(id=5, role="coder", instruction="  "), "neither")


def test_unknown_role(started: Scheduler) -> None:
    rejected(started, agent(5, role="poet"), "unknown role 'poet'", "coder, researcher")


def test_unknown_tool(started: Scheduler) -> None:
    rejected(started, tool(5, {}, name="rm"), "unknown tool 'rm'", "python, search")


def test_too_many_steps(started: Scheduler) -> None:
    started.add(agent(5))
    rejected(started, agent(6), "more than 5 steps")


def test_self_dependency(started: Scheduler) -> None:
    rejected(started, agent(5, 5), "depends on itself")
    rejected(started, tool(5, {"q": "${5}"}), "depends on itself")


def test_cycle_of_two_formed_by_a_forward_reference() -> None:
    s = make()
    s.add(agent(1, 2))  # forward reference: fine while streaming
    rejected(s, agent(2, 1), "cycle 2 -> 1 -> 2", "remove one")


def test_longer_cycle_through_args() -> None:
    s = make()
    s.add(agent(1, 2))
    s.add(tool(2, {"q": ["see $3"]}))
    rejected(s, agent(3, 1), "cycle 3 -> 1 -> 2 -> 3")
    s.add(agent(3))  # the same id is still free after the rejection
    s.close_plan()


def test_a_step_nothing_depends_on_yet_walks_no_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 34: a chain's step is checked for a cycle only when a known step names it
    (a forward reference), so accepting a chain costs O(1) per step, not O(n)."""
    walks: list[int] = []
    real = sys.modules["runtime.dag.scheduler"].cycle_through

    def counted(new_id: int, *args: Any) -> list[int]:
        walks.append(new_id)
        return real(new_id, *args)

    monkeypatch.setattr("runtime.dag.scheduler.cycle_through", counted)
    s = make(max_steps=200)
    for sid in range(1, 101):
        s.add(agent(sid, *([sid - 1] if sid > 1 else [])))
    assert walks == []
    s.add(agent(102, 101))  # forward reference to 101: 101 must be checked
    rejected(s, agent(101, 102), "cycle 101 -> 102 -> 101")
    assert walks == [101]


def test_dangling_dependency_at_close(started: Scheduler) -> None:
    before = snapshot(started)
    with pytest.raises(PlanValidationError, match=r"step 4 depends on step 9 \(depends_on\)"):
        started.close_plan()
    assert snapshot(started) == before
    started.add(agent(9))
    started.close_plan()
    assert started.closed


def test_dollar_reference_to_an_undeclared_step() -> None:
    s = make()
    s.add(tool(1, {"q": "about $7"}))
    with pytest.raises(PlanValidationError, match=r"step 1 depends on step 7 \(\$7 in its args\)"):
        s.close_plan()
    assert not s.is_done()


def test_empty_plan() -> None:
    with pytest.raises(PlanValidationError, match="no steps"):
        make().close_plan()


def test_no_steps_after_close() -> None:
    s = make()
    s.add(agent(1))
    s.close_plan()
    with pytest.raises(StepStateError, match="closed"):
        s.add(agent(2))


def test_invalid_moves_are_refused(started: Scheduler) -> None:
    with pytest.raises(StepStateError, match="cannot complete step 3: it is pending"):
        started.complete(3, "early")
    with pytest.raises(StepStateError, match="cannot start step 1: it is done"):
        started.start(1)
    with pytest.raises(StepStateError, match="not in the plan"):
        started.complete(42, "who?")


# -- $N substitution -----------------------------------------------------------------------


def test_dollar_one_never_corrupts_dollar_ten() -> None:
    s = make(finished={1: "a", 10: "TEN", 12: "TWELVE"})
    text = "$1 $10 $12 ${1}0 ${1}x x$1y $$ $ $x ${x} $0 ${10}"
    step = tool(13, {"q": text})
    assert ids(s.add(step)) == [13]
    assert s.resolve_args(step) == {"q": "a TEN TWELVE a0 ax xay $$ $ $x ${x} $0 TEN"}
    assert s.dependencies(13) == (1, 10, 12)


def test_nested_args_and_exact_match() -> None:
    s = make(finished={1: "42", 2: '{"k": 1}'})
    args: dict[str, Any] = {
        "exact": "$1",
        "braced": "${2}",
        "nested": ["$1", {"deep": ["pre-$2-post"], "n": 3}, None],
        "flag": True,
    }
    step = tool(3, args)
    s.add(step)
    assert s.resolve_args(step) == {
        "exact": "42",
        "braced": '{"k": 1}',
        "nested": ["42", {"deep": ['pre-{"k": 1}-post'], "n": 3}, None],
        "flag": True,
    }
    assert s.inputs_for(step) == {1: "42", 2: '{"k": 1}'}


def test_references_in_args_are_dependencies() -> None:
    s = make()
    s.add(agent(1))
    step = tool(2, {"q": "use $1"})
    assert s.add(step) == []
    assert s.complete(1, "it") == [step]
    assert s.resolve_args(step) == {"q": "use it"}


# -- timing and outcomes -------------------------------------------------------------------


def test_slow_branch_does_not_hold_back_the_fast_one() -> None:
    s = make()
    a1, a2, a3, b1, b2, join = (
        agent(1),
        agent(2, 1),
        agent(3, 2),
        agent(4),
        agent(5, 4),
        agent(6, 3, 5),
    )
    assert ids(s.add(a1)) == [1]
    assert ids(s.add(a2)) == []
    assert ids(s.add(b1)) == [4]
    s.start(1)
    s.start(4)  # branch B's first step is slow
    assert s.complete(1, "a1") == [a2]
    s.start(2)
    assert s.add(a3) == []
    assert s.complete(2, "a2") == [a3]
    s.start(3)
    assert s.add(b2) == [] and s.add(join) == []
    assert s.complete(3, "a3") == []  # the join also needs branch B
    assert s.state(4) is StepState.RUNNING
    s.close_plan()
    assert not s.is_done()
    assert s.complete(4, "b1") == [b2]
    s.start(5)
    assert s.complete(5, "b2") == [join]
    assert s.inputs_for(join) == {3: "a3", 5: "b2"}
    s.complete(6, "joined")
    assert s.is_done()


def test_retry_after_failure_and_after_rejection() -> None:
    s = make()
    s.add(agent(1))
    s.add(agent(2, 1))
    s.start(1)
    s.fail(1, "timeout")
    assert s.failures == {1: "timeout"} and s.blocked() == [2]
    assert s.retry(1).id == 1
    assert s.attempt(1) == 2 and s.state(1) is StepState.READY and s.failures == {}
    s.start(1)
    s.retry(1)  # the critic rejected the output: run it again
    assert s.attempt(1) == 3
    s.start(1)
    assert ids(s.complete(1, "fine")) == [2]
    with pytest.raises(StepStateError):
        s.retry(1)


def test_replan_keeps_finished_outputs() -> None:
    s = make()
    s.add(agent(1))
    s.add(agent(2))
    s.add(agent(3, 2))
    s.close_plan()
    s.start(1)
    s.complete(1, "kept")
    s.start(2)
    s.fail(2, "broken")
    assert s.is_done() and s.blocked() == [3]

    s.new_round()
    assert s.round == 1 and not s.closed and not s.is_done()
    assert s.state(1) is StepState.DONE and s.results == {1: "kept"}
    assert ids(s.steps) == [1] and s.ready() == [] and s.failures == {}
    with pytest.raises(StepStateError):
        s.state(2)
    rejected(s, agent(2), "id 2 is already used", "next: 4")
    rejected(s, agent(4, 3), "step 3, which was dropped", "done: 1")
    new = tool(4, {"q": "$1!"})
    assert s.add(new) == [new]  # its only dependency finished in round 0
    s.add(agent(5, 4))
    s.close_plan()
    assert ids(s.ready()) == [4]
    assert s.resolve_args(new) == {"q": "kept!"}
    assert ids(s.complete(4, "four")) == [5]
    s.complete(5, "five")
    assert s.is_done()
    assert s.results == {1: "kept", 4: "four", 5: "five"}


def test_a_new_round_needs_steps() -> None:
    s = make(finished={1: "earlier"})
    with pytest.raises(PlanValidationError, match="round 0"):
        s.close_plan()
    s.add(agent(2, 1))
    s.close_plan()
    assert s.steps == [agent(2, 1)] and ids(s.ready()) == [2]


def test_a_late_result_for_dropped_work_is_refused() -> None:
    s = make()
    s.add(agent(1))
    s.start(1)
    s.new_round()  # e.g. the supervisor asked for a replan while step 1 ran
    with pytest.raises(StepStateError, match="step 1 is not in the plan of round 1"):
        s.complete(1, "too late")
    assert s.results == {}


def test_discard_pending_keeps_dispatched_steps_and_forgets_the_rest() -> None:
    """After a rejected plan: running and finished steps stay, never-ready ones go."""
    s = make()
    s.add(agent(1))
    s.start(1)
    s.add(agent(2))
    s.start(2)
    s.complete(2, "two")
    s.add(agent(3, 1))  # waits on the running step
    s.add(agent(4, 9))  # waits on a step that never came (a dangling plan)
    assert sorted(s.discard_pending()) == [3, 4]
    assert ids(s.steps) == [1, 2] and s.state(1) is StepState.RUNNING
    assert s.complete(1, "one") == []  # nothing waits on it any more
    s.add(agent(3, 1))  # the corrected plan may reuse the ids
    s.close_plan()
    assert s.state(3) is StepState.READY


def test_a_restored_step_whose_dependencies_are_done_is_promoted_to_ready() -> None:
    """Step records can be newer than the run header: a dependency done, its dependent
    still pending. Nothing else would ever ready it."""
    s = Scheduler.restore(
        known_roles=["researcher"], known_tools=["search"], max_steps=10, round=0,
        closed=True, steps=[(agent(1), 0, StepState.DONE, 1, "one"),
                            (agent(2, 1), 0, StepState.PENDING, 1, ""),
                            (agent(3, 2), 0, StepState.PENDING, 1, "")])
    assert s.is_done()  # what made such a run end without step 2 and 3
    assert ids(s.promote()) == [2] and s.state(2) is StepState.READY
    assert s.promote() == [] and not s.is_done()


@settings(max_examples=150, deadline=None)
@given(dags(), st.data())
def test_is_done_agrees_with_the_states_through_every_kind_of_change(
    dag: tuple[list[Step], dict[int, set[int]]], data: st.DataObject
) -> None:
    """``is_done`` keeps a count of busy steps instead of scanning them all: it must agree
    with the states after adds, starts, outcomes, retries, discards, replans and a restore."""
    order, _ = dag
    s = make()
    to_add = list(order)

    def busy() -> bool:
        return any(s.state(step.id) in (StepState.READY, StepState.RUNNING) for step in s.steps)

    for _ in range(60):
        running = [st_.id for st_ in s.steps if s.state(st_.id) is StepState.RUNNING]
        failed = [st_.id for st_ in s.steps if s.state(st_.id) is StepState.FAILED]
        choices = (["add"] if to_add else []) + (["start"] if s.ready() else []) \
            + (["complete", "fail"] if running else []) + (["retry"] if failed else []) \
            + ["discard", "replan", "restore"]
        match data.draw(st.sampled_from(choices)):
            case "add":
                with contextlib.suppress(PlanValidationError):  # after a discard, say
                    s.add(to_add.pop(0))
                    if not to_add:
                        s.close_plan()
            case "start":
                s.start(data.draw(st.sampled_from(s.ready())).id)
            case "complete":
                s.complete(data.draw(st.sampled_from(running)), "out")
            case "fail":
                s.fail(data.draw(st.sampled_from(running)), "err")
            case "retry":
                s.retry(data.draw(st.sampled_from(failed)))
            case "discard":
                s.discard_pending()
            case "replan":
                s.new_round()
                to_add = []
            case "restore":
                s = Scheduler.restore(
                    known_roles=ROLES, known_tools=TOOLS, max_steps=50, round=s.round,
                    closed=s.closed, dropped=s.dropped,
                    steps=[(st_, s.round, s.state(st_.id), s.attempt(st_.id), "")
                           for st_ in s.steps])
        assert s.is_done() == (s.closed and not busy())
