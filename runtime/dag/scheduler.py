"""The plan's DAG state: which steps may run now, and which run next when one finishes.

The planner feeds steps in one at a time while the model is still writing the plan and
reports each outcome as it arrives; the scheduler answers with the steps that became ready
*at that moment*. A step is ready exactly when its last dependency is done: no supersteps,
no waiting for unrelated siblings. No I/O, no clocks: the planner owns time and messages.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from protocols import Step

from .errors import PlanValidationError, StepStateError
from .graph import CODE_ARGS, cycle_through, references, substitute
from .states import StepState, StepStates


class Scheduler:
    """The state of one run's plan DAG across plan rounds.

    Every step is validated the moment it arrives, so a bad plan is rejected before its
    mistake wastes work; a rejected step leaves the scheduler unchanged. Dependencies may
    name steps the planner has not written yet; `close_plan` checks they all appeared.
    """

    def __init__(
        self,
        *,
        known_roles: Collection[str],
        known_tools: Collection[str],
        max_steps: int,
        finished: Mapping[int, str] | None = None,
        round: int = 0,
    ) -> None:
        """``finished`` holds outputs of steps done in earlier rounds; they never run again.

        ``max_steps`` bounds the new steps of each round (finished ones don't count).
        """
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, not {max_steps}")
        self._roles = frozenset(known_roles)
        self._tools = frozenset(known_tools)
        self._max_steps = max_steps
        self._round = round
        self._closed = False
        self._new_in_round = 0
        self._steps: dict[int, Step] = {}  # emission order
        self._deps: dict[int, tuple[int, ...]] = {}
        self._dependents: dict[int, list[int]] = {}  # also keyed by ids not declared yet
        self._results: dict[int, str] = dict(finished or {})
        self._state = StepStates(dict.fromkeys(self._results, StepState.DONE))
        self._attempts = dict.fromkeys(self._results, 1)
        self._failures: dict[int, str] = {}
        self._dropped: set[int] = set()  # ids of earlier rounds' unfinished steps
        self.removals = 0
        """How many times steps have left the plan (a replan, a discarded plan)."""

    @classmethod
    def restore(
        cls, *, known_roles: Collection[str], known_tools: Collection[str], max_steps: int,
        round: int, closed: bool, steps: Sequence[tuple[Step, int, StepState, int, str]],
        dropped: Collection[int] = (),
    ) -> Scheduler:
        """Rebuild saved state (a planner taking a run over): no validation, no side effects.

        ``steps`` holds ``(step, its round, state, attempt, output or error)`` in emission
        order; a saved ``running`` step stays running (its outcome is still on its way).
        """
        s = cls(known_roles=known_roles, known_tools=known_tools, max_steps=max_steps,
                round=round)
        for step, step_round, state, attempt, text in steps:
            deps = tuple(sorted(set(step.depends_on) | set(references(step.args))))
            s._steps[step.id], s._deps[step.id] = step, deps
            s._state[step.id], s._attempts[step.id] = state, attempt
            for dep in deps:
                s._dependents.setdefault(dep, []).append(step.id)
            if state is StepState.DONE:
                s._results[step.id] = text
            elif state is StepState.FAILED:
                s._failures[step.id] = text
            s._new_in_round += step_round == round
        s._dropped = set(dropped)
        s._closed = closed
        return s

    def adopt(self, step: Step, round: int) -> None:
        """Restore: a step the run's log shows planned whose state was never saved (no
        checks, the round's plan may be closed by now): pending, or ready if what it
        needs is done."""
        deps = tuple(dict.fromkeys([*step.depends_on, *references(step.args)]))
        self._steps[step.id], self._deps[step.id], self._attempts[step.id] = step, deps, 1
        for dep in deps:
            self._dependents.setdefault(dep, []).append(step.id)
        self._state[step.id] = StepState.READY if self._deps_done(step.id) \
            else StepState.PENDING
        self._new_in_round += round == self._round

    def reorder(self, order: Sequence[int]) -> None:
        """Restore: steps in emission order (those adopted from the log came last); steps
        ``order`` does not name keep their place after the rest."""
        rank = {sid: i for i, sid in enumerate(order)}
        self._steps = dict(sorted(self._steps.items(),
                                  key=lambda item: rank.get(item[0], len(rank))))

    @property
    def dropped(self) -> frozenset[int]:
        """Ids of earlier rounds' unfinished steps (taken; a result for one is stale)."""
        return frozenset(self._dropped)

    # -- the plan arrives ----------------------------------------------------------------

    def add(self, step: Step) -> list[Step]:
        """Accept one streamed step; returns ``[step]`` if it can run at once, else ``[]``."""
        deps = self._validate(step)
        self._steps[step.id] = step
        self._deps[step.id] = deps
        self._attempts[step.id] = 1
        self._new_in_round += 1
        for dep in deps:
            self._dependents.setdefault(dep, []).append(step.id)
        if self._deps_done(step.id):
            self._state[step.id] = StepState.READY
            return [step]
        self._state[step.id] = StepState.PENDING
        return []

    def close_plan(self) -> None:
        """The plan stream ended: now every dependency must name a declared step."""
        if self._new_in_round == 0:
            raise PlanValidationError(
                f"the plan (round {self._round}) has no steps; write at least one step, "
                "one JSON object per line"
            )
        for sid, deps in self._deps.items():
            for dep in deps:
                if dep not in self._state:
                    step = self._steps[sid]
                    where = "depends_on" if dep in step.depends_on else f"${dep} in its args"
                    raise PlanValidationError(
                        f"step {sid} depends on step {dep} ({where}), but the plan never "
                        f"declares step {dep}; add step {dep} or remove the reference",
                        step_id=sid,
                    )
        self._closed = True

    def new_round(self) -> None:
        """Start a replan: done steps keep their outputs; all unfinished work is dropped.

        Dropped ids stay taken, so a late result for one of them is refused.
        """
        self.removals += 1
        for sid, state in list(self._state.items()):
            if state is not StepState.DONE:
                self._dropped.add(sid)
                del self._state[sid], self._steps[sid], self._deps[sid], self._attempts[sid]
                self._failures.pop(sid, None)
        self._dependents.clear()
        self._round += 1
        self._closed = False
        self._new_in_round = 0

    def discard_pending(self) -> list[int]:
        """Forget this round's steps that never started (after a rejected plan, or a held
        plan that is edited).

        Dispatched steps may be running and stay; a kept step never waits on a dropped one
        because only steps whose dependencies were all met ever started.
        """
        gone = [sid for sid, state in self._state.items()
                if state in (StepState.PENDING, StepState.READY)]
        self.removals += 1
        for sid in gone:
            del self._state[sid], self._steps[sid], self._deps[sid], self._attempts[sid]
            self._new_in_round -= 1
        for dependents in self._dependents.values():
            dependents[:] = [d for d in dependents if d not in gone]
        return gone

    def redispatched(self, step_id: int, attempt: int) -> None:
        """Restore: the run's log shows this attempt dispatched (its state was not saved)."""
        state = self.state(step_id)
        if state in (StepState.DONE, StepState.FAILED) and attempt <= self._attempts[step_id]:
            return  # the log is behind what was saved
        self._state[step_id] = StepState.RUNNING
        self._attempts[step_id] = attempt
        self._failures.pop(step_id, None)

    # -- outcomes ------------------------------------------------------------------------

    def start(self, step_id: int) -> None:
        """The step was dispatched to an executor."""
        self._move(step_id, "start", {StepState.READY}, StepState.RUNNING)

    def complete(self, step_id: int, output: str) -> list[Step]:
        """Record the output; returns the steps whose last dependency this was."""
        self._move(step_id, "complete", {StepState.READY, StepState.RUNNING}, StepState.DONE)
        self._results[step_id] = output
        ready = [
            self._steps[sid]
            for sid in self._dependents.get(step_id, ())
            if self._state.get(sid) is StepState.PENDING and self._deps_done(sid)
        ]
        for step in ready:
            self._state[step.id] = StepState.READY
        return ready

    def fail(self, step_id: int, error: str) -> None:
        """Mark the step failed; its dependents stay pending until it is retried."""
        self._move(step_id, "fail", {StepState.READY, StepState.RUNNING}, StepState.FAILED)
        self._failures[step_id] = error

    def retry(self, step_id: int) -> Step:
        """Make a failed (or rejected, still running) step ready again as a new attempt."""
        self._move(step_id, "retry", {StepState.FAILED, StepState.RUNNING}, StepState.READY)
        self._failures.pop(step_id, None)
        self._attempts[step_id] += 1
        return self._steps[step_id]

    # -- what executors get --------------------------------------------------------------

    def resolve_args(self, step: Step) -> dict[str, Any]:
        """The step's tool args with every ``$N`` / ``${N}`` replaced by step N's output,
        except in program text (``CODE_ARGS``): the tool binds those as data."""
        refs = references(step.args)
        if not refs:
            return step.args  # nothing to replace
        missing = sorted(set(refs) - self._results.keys())
        if missing:
            raise StepStateError(f"step {step.id} refers to steps {missing}, not done yet")
        return {key: value if key in CODE_ARGS else substitute(value, self._results)
                for key, value in step.args.items()}

    def code_inputs(self, step: Step) -> dict[int, str]:
        """The outputs a tool step's program text refers to: the tool binds them as data."""
        return {n: self._results[n] for key, value in step.args.items() if key in CODE_ARGS
                for n in references(value)}

    def inputs_for(self, step: Step) -> dict[int, str]:
        """The outputs of the step's dependencies (the context of an agent step)."""
        return {dep: self._results[dep] for dep in self.dependencies(step.id)}

    # -- queries -------------------------------------------------------------------------

    @property
    def round(self) -> int:
        """0 for the first plan, n for the n-th replan."""
        return self._round

    @property
    def steps_left(self) -> int:
        """New steps this round may still take (``max_steps`` less those it has)."""
        return max(self._max_steps - self._new_in_round, 0)

    @property
    def closed(self) -> bool:
        """True once `close_plan` accepted the current round."""
        return self._closed

    @property
    def steps(self) -> list[Step]:
        """Steps of this round and done steps of earlier ones, in emission order."""
        return list(self._steps.values())

    @property
    def results(self) -> dict[int, str]:
        """Outputs of done steps, including those of earlier rounds."""
        return dict(self._results)

    @property
    def failures(self) -> dict[int, str]:
        """The error of every step that is failed now."""
        return dict(self._failures)

    def step(self, step_id: int) -> Step:
        """The step with this id."""
        self.state(step_id)
        return self._steps[step_id]

    def state(self, step_id: int) -> StepState:
        """Where the step is in its life."""
        if step_id not in self._state:
            raise StepStateError(f"step {step_id} is not in the plan of round {self._round}")
        return self._state[step_id]

    def attempt(self, step_id: int) -> int:
        """1 for the first attempt; `retry` adds one."""
        self.state(step_id)
        return self._attempts[step_id]

    def dependencies(self, step_id: int) -> tuple[int, ...]:
        """``depends_on`` then ``$N`` references, without repeats."""
        self.state(step_id)
        return self._deps.get(step_id, ())

    def ready(self) -> list[Step]:
        """Steps ready but not started, in emission order."""
        return [s for sid, s in self._steps.items() if self._state[sid] is StepState.READY]

    def promote(self) -> list[Step]:
        """Pending steps whose dependencies are all done become ready (returned).

        Only a restored run can hold one: its step records may have been stored by a save
        whose run header never was, so a dependency is done and its dependent still waits.
        """
        ready = [s for sid, s in self._steps.items()
                 if self._state[sid] is StepState.PENDING and self._deps_done(sid)]
        for step in ready:
            self._state[step.id] = StepState.READY
        return ready

    def blocked(self) -> list[int]:
        """Pending steps that cannot run because something they need (transitively) failed."""
        found: set[int] = set()
        stack = list(self._failures)
        while stack:
            for sid in self._dependents.get(stack.pop(), ()):
                if sid not in found and self._state.get(sid) is StepState.PENDING:
                    found.add(sid)
                    stack.append(sid)
        return [sid for sid in self._steps if sid in found]

    def is_done(self) -> bool:
        """The plan is closed and nothing is ready or running (failed steps count as given up)."""
        return self._closed and self._state.busy == 0

    # -- private -------------------------------------------------------------------------

    def _deps_done(self, step_id: int) -> bool:
        return all(self._state.get(d) is StepState.DONE for d in self._deps[step_id])

    def _move(self, step_id: int, verb: str, allowed: set[StepState], to: StepState) -> None:
        state = self.state(step_id)
        if state not in allowed:
            names = " or ".join(sorted(s.value for s in allowed))
            raise StepStateError(f"cannot {verb} step {step_id}: it is {state.value}, not {names}")
        self._state[step_id] = to

    def _validate(self, step: Step) -> tuple[int, ...]:
        """Check one arriving step against the rules and the plan so far; its dependencies."""
        sid = step.id

        def bad(problem: str) -> PlanValidationError:
            return PlanValidationError(f"step {sid}: {problem}", step_id=sid)

        if self._closed:
            raise StepStateError(f"round {self._round} is closed; call new_round() first")
        if sid in self._state or sid in self._dropped:
            used = self._state.keys() | self._dropped
            raise bad(f"id {sid} is already used; give each step a new id (next: {max(used) + 1})")
        has_tool, has_instruction = bool(step.tool), bool((step.instruction or "").strip())
        if has_tool == has_instruction:
            which = "both" if has_tool else "neither"
            raise bad(
                f"sets {which} `tool` {'and' if has_tool else 'nor'} `instruction`; a step "
                "either calls a tool (`tool` + `args`) or asks the role's model "
                "(`instruction`): set exactly one"
            )
        if step.role not in self._roles:
            raise bad(f"unknown role {step.role!r}; use one of: {_listing(self._roles)}")
        if step.tool and step.tool not in self._tools:
            known = _listing(self._tools) or "(none: use an agent step with an instruction)"
            raise bad(f"unknown tool {step.tool!r}; the tools are: {known}")
        if self._new_in_round >= self._max_steps:
            raise bad(f"the plan has more than {self._max_steps} steps; combine related work")
        deps = tuple(dict.fromkeys([*step.depends_on, *references(step.args)]))
        if sid in deps:
            raise bad(f"depends on itself; remove {sid} from depends_on and ${sid} from args")
        for dep in deps:
            if dep in self._dropped:
                done = ", ".join(map(str, sorted(self._results))) or "none"
                raise bad(
                    f"depends on step {dep}, which was dropped with the previous plan; "
                    f"depend on a done step (done: {done}) or on a new step"
                )
        # A cycle through a new id needs a known step that depends on it (a forward
        # reference, always in ``_dependents``); without one, walking the plan so far made
        # every step of a chain O(n), its run O(n²).
        cycle = cycle_through(sid, deps, self._deps) if self._dependents.get(sid) else []
        if cycle:
            path = " -> ".join(map(str, cycle))
            raise bad(
                f"makes a cycle {path} (each needs the next); a plan must be a DAG, "
                "so remove one of these dependencies"
            )
        return deps


def _listing(names: Iterable[str]) -> str:
    return ", ".join(sorted(names))
