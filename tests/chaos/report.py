"""What a chaos run proved: per-run verdicts, the ledger, and silences around each fault."""

from __future__ import annotations

import itertools
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from protocols import ReplanStarted, RunEvent, RunFailed, RunFinished, StepFinished, StepPlanned

from ..invariants import event_log_violations
from .faults import KINDS, NODE_KINDS, Fault
from .ledger import Execution, Repeats, classify, redelivered, repeated
from .observe import StoredLog, Submission, Tracked
from .workload import ANSWER, MAX_SLEEP

EVIDENCE_SHOWN = 15
"""Log lines printed per troubled run (the JSON report keeps up to 200)."""


@dataclass
class RunVerdict:
    run_id: str
    status: str
    """``finished``, ``failed``, ``hung`` (no terminal event) or ``refused`` (never accepted)."""
    reason: str = ""
    """RunFailed's cause and reason, or the submit errors."""
    wrong: list[str] = field(default_factory=list)
    """Outputs (or the answer) that differ from the expected ones."""
    lost: list[int] = field(default_factory=list)
    """Last-round steps of a finished run that did not finish."""
    violations: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    """The actors' log lines about this run (for runs with a problem)."""
    events: int = 0
    last_event: str = ""
    """The last event seen (for hung runs)."""

    @property
    def correct(self) -> bool:
        return self.status == "finished" and not (self.wrong or self.lost or self.violations)

    @property
    def troubled(self) -> bool:
        """Worth its evidence: hung, wrong, lost steps or broke a rule."""
        return self.status == "hung" or bool(self.wrong or self.lost or self.violations)


@dataclass
class Silence:
    count: int
    p50: float
    max: float
    worst: str
    """Which run and fault gave the max."""


@dataclass
class Submissions:
    """``submit`` calls made while faults of one kind held (from injection to healing)."""

    made: int = 0
    accepted: int = 0
    refused: int = 0
    """Answered ``run.rejected``: every chaos goal is valid, so a passing failure was
    taken for a refusal; must be 0."""
    lost: int = 0
    """No answer within the deadline: the request went where nobody could serve it; must
    be 0."""


NO_FAULT = "no fault"
"""The row of submissions made while no fault held."""


@dataclass
class Report:
    config: dict[str, Any]
    runs: list[RunVerdict]
    duplicates: dict[str, int]
    """(run/step/attempt/task/delivery) executed more than once → times; must be empty."""
    redeliveries: int
    """Attempts executed more than once (a redelivery after a silent executor, or a second
    task for the attempt after a takeover or a lost publish acknowledgement)."""
    executions: int
    faults: list[Fault]
    unavailable: dict[str, str]
    silences: dict[str, Silence]
    seconds: float
    in_flight: dict[str, float]
    members: dict[str, list[int]]
    """Each actor member's process ids, first to last."""
    notes: list[str] = field(default_factory=list)
    permission_violations: list[str] = field(default_factory=list)
    """The servers' log lines refusing a user a publish, a subscription or a login: with
    per-role users, each is an actor or client doing what its user may not; must be empty."""
    submissions: dict[str, Submissions] = field(default_factory=dict)
    """By fault kind (and ``NO_FAULT``): the submit calls made meanwhile and their ends."""
    failed_submissions: list[str] = field(default_factory=list)
    """Each submit call refused or lost (a passing cause: the goals are valid); must be
    empty."""
    repeats: Repeats = field(default_factory=Repeats)
    """The executions beyond each attempt's first: (a) of a finished attempt, must be 0;
    (b) of an interrupted one; and the idempotency keys they carried."""

    def of(self, status: str) -> list[RunVerdict]:
        return [r for r in self.runs if r.status == status]

    def problems(self) -> list[str]:
        """What must be zero: hung runs, wrong answers, violations, duplicate executions,
        permission violations."""
        found = [f"hung: {r.run_id} (last event {r.last_event})" for r in self.of("hung")]
        found += [f"wrong answer: {r.run_id}: {w}" for r in self.runs for w in r.wrong]
        found += [f"violation: {r.run_id}: {v}" for r in self.runs for v in r.violations]
        found += [f"duplicate execution: {k} ran {n} times" for k, n in self.duplicates.items()]
        found += [f"repeat of a finished attempt: {k} ran again: {'; '.join(v)}"
                  for k, v in self.repeats.of_finished.items()]
        found += [f"idempotency keys differ: {k}" for k in self.repeats.keys_differ]
        found += [f"submission refused or lost: {f}" for f in self.failed_submissions]
        refused = self.permission_violations
        found += [f"permission violation: {line}" for line in refused[:EVIDENCE_SHOWN]]
        if len(refused) > EVIDENCE_SHOWN:
            found.append(f"permission violations: {len(refused) - EVIDENCE_SHOWN} more "
                         "(all in the JSON report)")
        return found


def judge(run: Tracked, log: StoredLog) -> RunVerdict:
    """One run's verdict from its stored events (and what its follower saw live)."""
    events = log.events
    verdict = RunVerdict(run.run_id, "hung", events=len(events))
    if not run.accepted and not events:
        why = "; ".join(run.submit_errors[-3:]) if run.submitted else "never submitted"
        return RunVerdict(run.run_id, "refused", reason=why)
    end = _end(events)
    ended = end is not None
    verdict.violations = [*event_log_violations(events, complete=ended), *log.conflicts,
                          *(f"live/replay: {m}" for m in run.mismatches)]
    if events:
        verdict.last_event = f"seq {events[-1].seq} {events[-1]!r:.160}"
    for event in events:
        if isinstance(event, StepFinished):
            want = run.spec.expected.get(event.step_id)
            if event.output != want:
                verdict.wrong.append(f"step {event.step_id} attempt {event.attempt} gave "
                                     f"{event.output!r:.120}, expected {want!r:.120}")
    if isinstance(end, RunFailed):
        verdict.status = "failed"
        verdict.reason = f"{end.cause or end.stage}: {end.reason}"
    elif isinstance(end, RunFinished):
        verdict.status = "finished"
        if end.answer != ANSWER:
            verdict.wrong.append(f"answer {end.answer!r:.120}, expected {ANSWER!r}")
        verdict.lost = _lost(events[:events.index(end) + 1])
    return verdict


def _end(events: Sequence[RunEvent]) -> RunFinished | RunFailed | None:
    """The run's first terminal event: where a client's ``follow`` stops (anything stored
    after it is a violation, not a sign that the run goes on)."""
    return next((e for e in events if isinstance(e, RunFinished | RunFailed)), None)


def _lost(events: Sequence[RunEvent]) -> list[int]:
    """Steps of the last round without a step.finished."""
    start = max((i for i, e in enumerate(events) if isinstance(e, ReplanStarted)), default=0)
    planned = {e.step.id for e in events[start:] if isinstance(e, StepPlanned)}
    done = {e.step_id for e in events if isinstance(e, StepFinished)}
    return sorted(planned - done)


def submission_figures(faults: Sequence[Fault], runs: Sequence[Tracked],
                       until: float) -> tuple[dict[str, Submissions], list[str]]:
    """Each submit call, counted under every kind of fault that held when it was made (or
    ``NO_FAULT``); and a line for each one refused or lost."""
    figures = {kind: Submissions() for kind in (*KINDS, NO_FAULT)}
    failed = []
    for run in runs:
        for call in run.submissions:
            during = [f for f in faults if f.start <= call.start <= (f.end or until)]
            for kind in {f.kind for f in during} or {NO_FAULT}:
                _count(figures[kind], call)
            if call.outcome != "accepted":
                held = ", ".join(f.describe() for f in during) or NO_FAULT
                failed.append(f"{run.run_id} at {call.start:.1f} ({call.end - call.start:.1f}s;"
                              f" during {held}): {call.error:.200}")
    return figures, failed


def _count(figures: Submissions, call: Submission) -> None:
    figures.made += 1
    setattr(figures, call.outcome, getattr(figures, call.outcome) + 1)


@dataclass(frozen=True)
class Timeline:
    run_id: str
    times: list[float]
    """Its events' times, in order."""
    ended: bool


def silences(faults: Sequence[Fault], runs: Sequence[Timeline],
             until: float) -> dict[str, Silence]:
    """Per kind: for each fault and each run active when it struck, the longest gap between
    consecutive events of that run overlapping the fault (from injection to healing).
    Only runs that ended count: a hung run's silence has no end and is reported as a hang."""
    found: dict[str, list[tuple[float, str]]] = {}
    for fault in faults:
        end = fault.end or until
        for run in runs:
            points = sorted(run.times)
            if not run.ended or not points or points[0] > fault.start \
                    or points[-1] < fault.start:
                continue  # not active when the fault struck
            gaps = [b - a for a, b in itertools.pairwise(points)
                    if a < end and b > fault.start]
            if gaps:
                found.setdefault(fault.kind, []).append(
                    (max(gaps), f"{run.run_id} around {fault.describe()}"))
    result = {}
    for kind, values in found.items():
        worst = max(values)
        result[kind] = Silence(len(values), statistics.median(v for v, _ in values),
                               worst[0], worst[1])
    return result


def timelines(runs: Sequence[Tracked], logs: dict[str, StoredLog]) -> list[Timeline]:
    found = []
    for run in runs:
        events = logs[run.run_id].events
        end = _end(events)
        if end is not None:
            events = events[:events.index(end) + 1]
        found.append(Timeline(run.run_id, [e.ts for e in events], end is not None))
    return found


def ledger_figures(executions: list[Execution],
                   recorded_at: dict[tuple[str, int, int], float] | None = None,
                   ) -> tuple[dict[str, int], int, Repeats]:
    """Deliveries run twice, attempts run more than once, and why they were (``classify``:
    ``recorded_at`` says when each attempt's result was recorded)."""
    twice = {"/".join(map(str, k)): n for k, n in repeated(executions).items()}
    return twice, len(redelivered(executions)), classify(executions, recorded_at)


def render(report: Report) -> str:
    """The report as a table, for a terminal."""
    runs = report.runs
    lines = [f"chaos: {len(runs)} runs, {len(report.faults)} faults in {report.seconds:.0f}s "
             f"(seed {report.config.get('seed')}); in flight mean "
             f"{report.in_flight.get('mean', 0):.1f}, max {report.in_flight.get('max', 0):.0f}",
             "",
             f"  runs submitted                 {len(runs)}",
             f"  finished correctly             {sum(r.correct for r in runs)}",
             f"  finished, wrong answer         {sum(bool(r.wrong) for r in runs)}",
             f"  finished, steps lost           {sum(bool(r.lost) for r in runs)}",
             f"  failed with a reason           {len(report.of('failed'))}",
             f"  hung (no terminal event)       {len(report.of('hung'))}",
             f"  never accepted                 {len(report.of('refused'))}",
             f"  runs with log violations       {sum(bool(r.violations) for r in runs)}"
             f" ({_by_rule(runs)})",
             f"  executions (ledger)            {report.executions}",
             f"  duplicate executions/delivery  {len(report.duplicates)}",
             f"  attempts run more than once    {report.redeliveries}",
             f"  (a) repeats, finished attempt  {_count_of(report.repeats)}"
             f" (must be 0; finished: {report.repeats.finished_from})",
             f"  (b) repeats, interrupted       {report.repeats.of_interrupted}"
             f" ({report.repeats.ended_unrecorded} after a tool had returned, unrecorded)",
             f"  idempotency keys               {_key_check(report.repeats)}",
             f"  permission violations (nodes)  {len(report.permission_violations)}"
             f" (users {'on' if report.config.get('users') else 'off'})",
             "", "  fault kind    count  silence p50   max    worst  (runs that ended; steps "
             f"sleep up to {MAX_SLEEP:g}s)"]
    counts = Counter(f.kind for f in report.faults)
    for kind in KINDS:
        if kind in report.unavailable:
            lines.append(f"  {kind:<12} unavailable: {report.unavailable[kind]}")
            continue
        s = report.silences.get(kind)
        figures = f"{s.p50:8.2f}s {s.max:6.2f}s  {s.worst}" if s else "       -"
        lines.append(f"  {kind:<12} {counts[kind]:5}  {figures}")
    lines += _recoveries(report.faults)
    lines += _submission_lines(report)
    for r in runs:
        if r.status == "refused":
            lines.append(f"  never accepted {r.run_id}: {r.reason:.200}")
        if r.status == "failed":
            lines.append(f"  failed {r.run_id}: {r.reason:.200}")
        if r.lost:
            lines.append(f"  steps lost {r.run_id}: {r.lost}")
    lines += [f"  PROBLEM {p:.300}" for p in report.problems()]
    for r in runs:
        if r.troubled and r.evidence:
            lines.append(f"  -- {r.run_id} ({r.status}), the actors' last lines about it:")
            lines += [f"     {e}" for e in r.evidence[-EVIDENCE_SHOWN:]]
    lines += [f"  note: {n}" for n in report.notes]
    return "\n".join(lines)


def _count_of(repeats: Repeats) -> int:
    return sum(len(v) for v in repeats.of_finished.values())


def _key_check(repeats: Repeats) -> str:
    """Did every execution of an attempt carry the same key?"""
    if not repeats.keys_checked:
        return "not checked (the step context carries no idempotency key)"
    return (f"{repeats.keys_checked} attempts run more than once, "
            f"{len(repeats.keys_differ)} with differing keys (must be 0)")


def _by_rule(runs: Sequence[RunVerdict]) -> str:
    """``12 violations: claimant 7, settled 5`` (the rule is the bracketed first word)."""
    rules = Counter(v.split("]", 1)[0].lstrip("[") if v.startswith("[") else "other"
                    for r in runs for v in r.violations)
    listed = ", ".join(f"{rule} {n}" for rule, n in rules.most_common())
    return f"{sum(rules.values())} violations" + (f": {listed}" if listed else "")


def _submission_lines(report: Report) -> list[str]:
    """Submit calls by the fault they were made during; refused or lost must be 0."""
    if not report.submissions:
        return []
    lines = ["", "  submissions   made  accepted  refused  lost  (submit calls, by the fault "
                 "held when made; refused or lost: a passing cause, must be 0)"]
    for kind, s in report.submissions.items():
        lines.append(f"  {kind:<12} {s.made:5} {s.accepted:9} {s.refused:8} {s.lost:5}")
    lines += [f"  submission refused or lost: {f:.300}" for f in report.failed_submissions]
    return lines


def _recoveries(faults: Sequence[Fault]) -> list[str]:
    """How long the cluster took to be healthy again after each kind of node fault."""
    lines = []
    for kind in sorted({f.kind for f in faults if f.kind in NODE_KINDS}):
        mine = [f for f in faults if f.kind == kind and f.end]
        took = [f.recovered - f.end for f in mine if f.recovered]
        if took:
            lines.append(f"  {kind:<12} cluster healthy again after p50 "
                         f"{statistics.median(took):.2f}s, max {max(took):.2f}s; "
                         f"not in time (the next node fault overlapped): "
                         f"{len(mine) - len(took)}")
    return lines


def to_json(report: Report) -> dict[str, Any]:
    data = asdict(report)
    data["summary"] = {
        "submitted": len(report.runs),
        "finished_correctly": sum(r.correct for r in report.runs),
        "wrong_answers": sum(bool(r.wrong) for r in report.runs),
        "steps_lost": sum(bool(r.lost) for r in report.runs),
        "failed": len(report.of("failed")),
        "hung": len(report.of("hung")),
        "refused": len(report.of("refused")),
        "runs_with_violations": sum(bool(r.violations) for r in report.runs),
        "violations": _by_rule(report.runs),
        "duplicate_executions": len(report.duplicates),
        "redelivered_attempts": report.redeliveries,
        "repeats_of_finished_attempts": _count_of(report.repeats),
        "repeats_of_interrupted_attempts": report.repeats.of_interrupted,
        "repeats_after_an_unrecorded_end": report.repeats.ended_unrecorded,
        "finished_from": report.repeats.finished_from,
        "idempotency_keys_checked": report.repeats.keys_checked,
        "idempotency_keys_differ": len(report.repeats.keys_differ),
        "permission_violations": len(report.permission_violations),
        "users": bool(report.config.get("users")),
        "faults": dict(Counter(f.kind for f in report.faults)),
        "submissions": {k: asdict(v) for k, v in report.submissions.items()},
        "submissions_refused_or_lost": len(report.failed_submissions),
    }
    return data
