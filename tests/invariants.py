"""What every run's event log must satisfy, whatever failed while it ran.

``event_log_violations(events)`` reads one run's events in sequence order (as
``runtime.client.follow`` yields them: numbers a ``run.resumed`` declares lost are dropped,
even stored) and returns what is wrong, one sentence each,
starting with the rule's name in brackets (``[dependencies] seq 12 ...``); an empty list
means the log is consistent. The pipeline tests, the kill tests and the chaos
suite all call it, so a change to delivery, state or the planner is judged by the same
rules everywhere:

- the sequence is 1..n, and exactly one terminal event ends it;
- an attempt is dispatched at most once and has at most one outcome; nothing happens to
  an attempt before its dispatch (nor is it started after its outcome); attempt a+1 is
  dispatched only after attempt a failed with ``will_retry``; an executor's finish comes
  from one of the attempt's claimants (a ``step.started`` of it);
- planned step ids are unique (a step discarded with a rejected plan may be planned
  again); a dispatched step was planned, and every step it depends on had finished;
- a finished run settled every step of its last round: finished, given up, or blocked
  behind one given up, and no attempt of that round is left without an outcome;
- once a replan starts, the unfinished steps of earlier rounds see no more dispatches,
  starts or finishes (refused outcomes about them are fine).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from protocols import (
    PlanApproved,
    PlanRejected,
    ReplanStarted,
    RunEvent,
    RunFailed,
    RunFinished,
    RunResumed,
    Step,
    StepDispatched,
    StepFailed,
    StepFinished,
    StepPlanned,
    StepStarted,
)

Attempt = tuple[int, int]
"""(step id, attempt)."""


GATE_CAUSES = ("declined", "approval")
"""Why an attempt held at its approval gate fails without ever being dispatched."""


def event_log_violations(events: Sequence[RunEvent], *, complete: bool = True) -> list[str]:
    """Every broken rule in one run's events (in seq order); empty if none.

    ``complete=False`` checks a log that may still grow (a run that has not ended yet, or
    never will): the terminal-event rules are skipped, everything else applies.
    """
    found = _sequence(events, complete)
    checker = _StepRules()
    lost = _declared_lost(events)
    for event in events:
        if event.seq not in lost:  # read as subscribers read it (``follow``)
            checker.apply(event)
    found += checker.violations
    if events and isinstance(events[-1], RunFinished):
        found += checker.settled_when_finished(events[-1].seq)
    return found


def _declared_lost(events: Sequence[RunEvent]) -> set[int]:
    """Numbers a ``run.resumed`` lists as never stored, or stored behind one that was not:
    they do not count, even where stored, and subscribers never see them."""
    return {n for e in events if isinstance(e, RunResumed) for n in e.skipped}


def _sequence(events: Sequence[RunEvent], complete: bool) -> list[str]:
    found: list[str] = []
    expected = 1
    lost = _declared_lost(events)
    for event in events:
        while event.seq > expected and expected in lost:  # said never to exist: no gap
            expected += 1
        if event.seq != expected:
            what = "repeats" if event.seq < expected else "skips to"
            found.append(f"[sequence] event {expected} {what} {event.seq} ({_name(event)})")
            expected = event.seq
        expected += 1
    terminal = [e for e in events if isinstance(e, RunFinished | RunFailed)]
    if complete and not terminal:
        found.append("[terminal] no terminal event (run.finished or run.failed)")
    if len(terminal) > 1:
        found.append("[terminal] more than one terminal event: seq "
                     + ", ".join(str(e.seq) for e in terminal))
    if terminal and terminal[0] is not events[-1]:
        found.append(f"[terminal] events after the terminal event at seq {terminal[0].seq}")
    return found


@dataclass
class _StepRules:
    """Walks the log once, keeping what each rule needs to know so far."""

    violations: list[str] = field(default_factory=list)
    steps: dict[int, Step] = field(default_factory=dict)
    """The latest definition of every planned step."""
    round_of: dict[int, int] = field(default_factory=dict)
    """Which replan generation (count of ReplanStarted before it) planned each step."""
    generation: int = 0
    last_round: set[int] = field(default_factory=set)
    """Steps the current round must settle (planned since the last replan, not discarded)."""
    dispatched: dict[Attempt, int] = field(default_factory=dict)
    """Attempt → seq of its dispatch."""
    dispatched_steps: set[int] = field(default_factory=set)
    claimants: dict[Attempt, set[str]] = field(default_factory=dict)
    """Each attempt's executors, from its step.started events."""
    outcome: dict[Attempt, StepFinished | StepFailed] = field(default_factory=dict)
    finished: set[int] = field(default_factory=set)
    given_up: set[int] = field(default_factory=set)

    def bad(self, rule: str, event: RunEvent, text: str) -> None:
        self.violations.append(f"[{rule}] seq {event.seq} {_name(event)}: {text}")

    def apply(self, event: RunEvent) -> None:
        match event:
            case StepPlanned():
                self._planned(event)
            case PlanRejected() | PlanApproved(edited=True):
                # Steps not dispatched yet are discarded: the corrected (or edited) plan may
                # redo them.
                self.last_round &= self.dispatched_steps
            case ReplanStarted():
                self.generation += 1
                self.last_round = set()
            case StepDispatched():
                self._dispatched(event)
            case StepStarted():
                self._touches(event, event.step_id, event.attempt)
                if (event.step_id, event.attempt) in self.outcome:
                    self.bad("after-outcome", event, "started after the attempt's outcome")
                self.claimants.setdefault((event.step_id, event.attempt), set()).add(
                    event.executor)
            case StepFinished() | StepFailed():
                self._outcome(event)
            case _:
                pass

    def _planned(self, event: StepPlanned) -> None:
        sid = event.step.id
        if sid in self.steps:
            again = sid not in self.last_round and sid not in self.dispatched_steps \
                and self.round_of[sid] == self.generation
            if not again:
                self.bad("planned-once", event, f"step {sid} was planned before")
        self.steps[sid] = event.step
        self.round_of[sid] = self.generation
        self.last_round.add(sid)

    def _dispatched(self, event: StepDispatched) -> None:
        key = (event.step_id, event.attempt)
        step = self.steps.get(event.step_id)
        if step is None:
            self.bad("planned-first", event, f"step {event.step_id} was never planned")
        if key in self.dispatched:
            self.bad("one-dispatch", event, f"attempt {event.attempt} of step {event.step_id} "
                     f"was already dispatched at seq {self.dispatched[key]}")
        self._abandoned(event, event.step_id)
        if event.attempt > 1:
            before = self.outcome.get((event.step_id, event.attempt - 1))
            if not (isinstance(before, StepFailed) and before.will_retry):
                self.bad("retry-order", event, f"attempt {event.attempt} of step "
                         f"{event.step_id} without a failed attempt {event.attempt - 1} that "
                         "will retry")
        if step is not None:
            missing = [d for d in step.depends_on if d not in self.finished]
            if missing:
                self.bad("dependencies", event, f"step {event.step_id} dispatched before "
                         f"its dependencies {missing} finished")
        self.dispatched.setdefault(key, event.seq)
        self.dispatched_steps.add(event.step_id)

    def _outcome(self, event: StepFinished | StepFailed) -> None:
        key = (event.step_id, event.attempt)
        if isinstance(event, StepFinished):
            self._touches(event, *key)
            claimed = self.claimants.get(key, set())
            if event.executor and claimed and event.executor not in claimed:
                self.bad("claimant", event, f"finished by {event.executor}, which never "
                         f"claimed it (claimants: {', '.join(sorted(claimed))})")
        elif key not in self.dispatched and event.cause not in GATE_CAUSES:
            self.bad("dispatched-first", event, f"attempt {event.attempt} of step "
                     f"{event.step_id} failed ({event.cause or 'error'}) but was never "
                     "dispatched")
        if key in self.outcome:
            self.bad("one-outcome", event, f"attempt {event.attempt} of step {event.step_id} "
                     f"already had an outcome at seq {self.outcome[key].seq}")
            return
        self.outcome[key] = event
        if isinstance(event, StepFinished):
            self.finished.add(event.step_id)
        elif not event.will_retry:
            self.given_up.add(event.step_id)

    def _touches(self, event: StepStarted | StepFinished, step_id: int, attempt: int) -> None:
        """A start or a finish: its attempt was dispatched, its round is not over."""
        if (step_id, attempt) not in self.dispatched:
            self.bad("dispatched-first", event,
                     f"attempt {attempt} of step {step_id} was never dispatched")
        self._abandoned(event, step_id)

    def _abandoned(self, event: RunEvent, step_id: int) -> None:
        old = self.round_of.get(step_id, self.generation) < self.generation
        if old and step_id not in self.finished:
            self.bad("round-over", event, f"step {step_id} belongs to a round a replan ended")

    def settled_when_finished(self, seq: int) -> list[str]:
        """The run finished: its last round's steps all reached an end."""
        found: list[str] = []
        ended = self.finished | self.given_up
        blocked: set[int] = set()
        grew = True
        while grew:  # blocked behind a step given up, directly or through blocked ones
            grew = False
            for sid in self.last_round - ended - blocked:
                if any(d in self.given_up or d in blocked for d in self.steps[sid].depends_on):
                    blocked.add(sid)
                    grew = True
        for sid in sorted(self.last_round - ended - blocked):
            found.append(f"[settled] seq {seq} run.finished: step {sid} of the last round neither "
                         "finished nor failed for good (nor waits behind one that failed)")
        for (sid, attempt), at in sorted(self.dispatched.items()):
            if sid in self.last_round and (sid, attempt) not in self.outcome:
                found.append(f"[settled] seq {seq} run.finished: attempt {attempt} of step {sid} "
                             f"(dispatched at seq {at}) has no outcome")
        return found


def _name(event: RunEvent) -> str:
    tag = str(type(event).__struct_config__.tag)
    step, attempt = getattr(event, "step_id", None), getattr(event, "attempt", 0)
    return tag if step is None else f"{tag}(step {step}, attempt {attempt})"
