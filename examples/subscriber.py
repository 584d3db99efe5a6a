"""Follow a run's progress from anywhere with a NATS connection (the dashboard use case).

    python examples/subscriber.py RUN_ID --nats nats://host:4222 [--prefix plancast] [--json]

A run's events live on the JetStream subject ``<prefix>.event.<run_id>``, so a
subscriber that arrives late (even after the run ended) replays it from the first event.
Each event carries ``seq`` 1, 2, 3 ... with no gaps (but for numbers a ``run.resumed``
event lists as ``skipped``, which do not count even if stored), so a subscriber knows it
missed nothing. Exits 0 when the run finished, 1 when it failed.

Any language can do the same: subscribe to the subject with an ordered consumer
(deliver policy "all") and decode the JSON; ``plancast schema`` prints its schema.
"""

from __future__ import annotations

import argparse
import sys

import anyio

from protocols import (
    CriticVerdict,
    OutcomeRefused,
    PlanApproved,
    PlanAwaitingApproval,
    PlanFinished,
    PlanRejected,
    PlanStarted,
    ReplanStarted,
    RunEvent,
    RunFailed,
    RunFinished,
    RunResumed,
    RunStarted,
    StepApproved,
    StepAwaitingApproval,
    StepDispatched,
    StepFailed,
    StepFinished,
    StepPlanned,
    StepReviewing,
    StepStarted,
    UsageRecorded,
    WorkFailed,
    encode,
)
from runtime import Settings, follow, open_bus
from runtime.errors import PlancastError


def describe(event: RunEvent) -> str:
    """One line for a human; the ``--json`` output is the wire format itself."""
    match event:
        case RunStarted(goal=goal):
            return f"run started: {goal[:80]}"
        case PlanStarted(round=round_):
            return f"planning (round {round_})"
        case PlanFinished(round=round_, steps=steps):
            return f"plan of round {round_} ready: {steps} steps"
        case StepPlanned(step=step):
            what = step.title or step.tool or (step.instruction or "")[:40]
            return f"step {step.id} planned for {step.role}: {what}"
        case StepDispatched(step_id=sid, role=role, attempt=attempt):
            return f"step {sid} sent to {role} (attempt {attempt})"
        case StepStarted(step_id=sid, executor=executor, child_run=child):
            return f"step {sid} started by {executor}" + (f" as run {child}" if child else "")
        case StepReviewing(step_id=sid):
            return f"step {sid} under the critic's review"
        case StepFinished(step_id=sid, output=output):
            return f"step {sid} finished: {output[:60]!r}"
        case StepFailed(step_id=sid, error=error, will_retry=retry):
            return f"step {sid} failed{' (will retry)' if retry else ''}: {error[:60]}"
        case CriticVerdict(step_id=sid, approved=approved, critique=critique):
            return f"critic {'approved' if approved else 'rejected'} step {sid}: {critique[:60]}"
        case UsageRecorded(source=source, usage=usage, total=total):
            return (f"{source} used {usage.total_tokens} tokens (run total "
                    f"{'~' if total.estimated else ''}{total.total_tokens})")
        case PlanAwaitingApproval(round=round_, reviewer=reviewer):
            return f"plan of round {round_} awaits approval ({reviewer})"
        case PlanApproved(round=round_, by=by):
            return f"plan of round {round_} approved by {by}"
        case StepAwaitingApproval(step_id=sid, reason=reason):
            return f"step {sid} awaits approval: {reason[:60]}"
        case StepApproved(step_id=sid, by=by):
            return f"step {sid} approved by {by}"
        case WorkFailed(work=work, actor=actor, error=error):
            return f"{work} failed at {actor}: {error[:60]}"
        case OutcomeRefused(kind=kind, reason=reason):
            return f"a {kind} was refused: {reason[:60]}"
        case RunResumed(planner=planner):
            return f"run resumed by planner {planner}"
        case PlanRejected(error=error):
            return f"plan rejected: {error[:80]}"
        case ReplanStarted(round=round_, reason=reason):
            return f"replan {round_}: {reason[:80]}"
        case RunFinished(answer=answer):
            return f"finished: {answer}"
        case RunFailed(stage=stage, reason=reason):
            return f"failed at {stage}: {reason}"
    return "an event of a kind this example does not know"  # a kind added since


async def watch(run_id: str, settings: Settings, as_json: bool, idle: float) -> int:
    # A subscriber only reads: it does not create streams (ensure_streams=False).
    async with open_bus(settings, ensure_streams=False) as bus:
        async for event in follow(bus, run_id, idle_timeout=idle):
            if as_json:
                print(encode(event).decode(), flush=True)
            else:
                print(f"{event.seq:4} {describe(event)}", flush=True)
            if isinstance(event, RunFinished):
                return 0
            if isinstance(event, RunFailed):
                return 1
    return 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_id", help="the run to follow (printed by `plancast run`)")
    parser.add_argument("--nats", help="NATS server URL(s); default: $NATS_URL")
    parser.add_argument("--prefix", help="subject prefix; default: $PLANCAST_PREFIX or plancast")
    parser.add_argument("--json", action="store_true", help="print events as NDJSON")
    parser.add_argument("--idle-timeout", type=float, default=60.0,
                        help="give up after this many seconds without an event (an unknown "
                             "run id has none); default 60")
    args = parser.parse_args()
    overrides = {k: v for k, v in {"nats_url": args.nats, "prefix": args.prefix}.items() if v}
    settings = Settings(**overrides)
    if settings.nats_url is None:
        parser.error("give --nats or set NATS_URL: a subscriber joins an existing deployment")
    try:
        return anyio.run(watch, args.run_id, settings, args.json, args.idle_timeout)
    except PlancastError as exc:  # unreachable server, a run with no event: one line
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
