"""Submit a run, record its events, and read timings off them (every ``ts`` is time.time())."""

from __future__ import annotations

from dataclasses import dataclass

from protocols import (
    PlanFinished,
    RunEvent,
    RunFailed,
    RunFinished,
    RunRequest,
    RunStarted,
    StepFinished,
    StepPlanned,
    StepStarted,
)
from runtime.bus import Bus
from runtime.client import follow, submit


class RunDidNotFinish(RuntimeError):
    """A benchmark run failed: the numbers would be meaningless."""


@dataclass
class RunTrace:
    """One run's events, with the timings the suites report."""

    events: list[RunEvent]

    def _first(self, kind: type[RunEvent]) -> RunEvent:
        return next(e for e in self.events if isinstance(e, kind))

    @property
    def start(self) -> float:
        return self._first(RunStarted).ts

    @property
    def makespan(self) -> float:
        """RunStarted → RunFinished, seconds."""
        return self._first(RunFinished).ts - self.start

    def steps_span(self) -> float:
        """First StepPlanned → last StepFinished: the run without its fixed model calls."""
        first = min(e.ts for e in self.events if isinstance(e, StepPlanned))
        return max(e.ts for e in self.events if isinstance(e, StepFinished)) - first

    def planned_at(self) -> dict[int, float]:
        """Per step: its StepPlanned time, relative to the run's start."""
        return {e.step.id: e.ts - self.start for e in self.events if isinstance(e, StepPlanned)}

    def plan_end(self) -> float:
        return self._first(PlanFinished).ts - self.start

    def ready_to_start(self) -> list[float]:
        """Per step: when its first attempt started minus when it became ready (last
        dependency finished, or planned if later). A step that ended before its claim was
        due (its result carried the claim) started at its finish minus its duration."""
        planned: dict[int, tuple[float, list[int]]] = {}
        finished: dict[int, float] = {}
        started: dict[int, float] = {}
        for e in self.events:
            if isinstance(e, StepPlanned):
                planned[e.step.id] = (e.ts, list(e.step.depends_on))
            elif isinstance(e, StepFinished):
                finished[e.step_id] = e.ts
                if e.attempt == 1 and e.step_id in started:
                    started[e.step_id] = min(started[e.step_id], e.ts - e.duration)
            elif isinstance(e, StepStarted) and e.attempt == 1:
                started.setdefault(e.step_id, e.ts)
        out: list[float] = []
        for sid, ts in started.items():
            at, deps = planned[sid]
            ready = max([at, *(finished[d] for d in deps)])
            out.append(max(0.0, ts - ready))
        return out


async def run_goal(bus: Bus, goal: str, *, max_steps: int = 1000) -> RunTrace:
    """Submit ``goal`` and follow it to the end; raises RunDidNotFinish if it failed."""
    accepted = await submit(bus, RunRequest(goal=goal, max_replans=0, max_steps=max_steps))
    events = [event async for event in follow(bus, accepted.run_id)]
    last = events[-1]
    if isinstance(last, RunFailed):
        raise RunDidNotFinish(f"run {accepted.run_id} for {goal!r} failed: {last.reason}")
    if not isinstance(last, RunFinished):
        raise RunDidNotFinish(f"run {accepted.run_id} ended without a terminal event")
    return RunTrace(events)
