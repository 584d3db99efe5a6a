"""The ``ledger`` tool: every execution of a step leaves a line as it starts and one as it
ends, and returns a known output.

Each call appends ``<run>/<step>/<attempt>/<delivery> <executor> <pid> <task> start <time>
<key>`` to ``$PLANCAST_TEST_DIR/chaos-ledger.txt`` (one short ``O_APPEND`` write, so lines
from many processes never interleave), sleeps ``sleep`` seconds, appends the same line
with ``end`` and returns ``ledger_output(tag, inputs)``, which the workload computes ahead
to check answers. ``<key>`` is the step's idempotency key as the tool saw it (``-`` where
the runtime gives none). Lines of the older form (no event, time or key) are read as
starts.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import msgspec

from runtime.tools import FunctionTool, StepContext, current_step

LEDGER = "chaos-ledger.txt"
LONG = 120
"""Inputs longer than this are summarised by a digest, so outputs stay short."""
NO_KEY = "-"
"""The key column when the step's context carries no idempotency key."""


class LedgerArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    tag: str
    """Names the step's output."""
    inputs: list[str] = []
    """Outputs of earlier steps (``$N`` references, substituted before the call)."""
    sleep: float = 0.0
    """Seconds the step takes."""


def ledger_output(tag: str, inputs: list[str]) -> str:
    """What the tool returns for these arguments."""
    joined = ",".join(inputs)
    if len(joined) > LONG:
        joined = "#" + hashlib.sha256(joined.encode()).hexdigest()[:16]
    return f"{tag}({joined})"


async def ledger(args: LedgerArgs) -> str:
    ctx = current_step.get()
    assert ctx is not None, "ledger runs only inside a step"
    task = getattr(ctx, "task", 0)  # the task's stream sequence, where the runtime has it
    head = (f"{ctx.run_id}/{ctx.step_id}/{ctx.attempt}/{ctx.delivery} {ctx.executor} "
            f"{os.getpid()} {task}")
    key = idempotency_key(ctx)
    _append(f"{head} start {time.time():.6f} {key}\n")
    await anyio.sleep(args.sleep)
    _append(f"{head} end {time.time():.6f} {key}\n")
    return ledger_output(args.tag, args.inputs)


def idempotency_key(ctx: StepContext) -> str:
    """The step's idempotency key as a tool sees it (``NO_KEY`` where the runtime gives
    none): every execution of one attempt must see the same one. The hook for issue 32's
    key: it reads the context's ``idempotency_key`` field, if the runtime has it."""
    key = getattr(ctx, "idempotency_key", None)
    return str(key) if key else NO_KEY


def _append(line: str) -> None:
    fd = os.open(Path(os.environ["PLANCAST_TEST_DIR"]) / LEDGER,
                 os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def chaos_tools() -> list[FunctionTool[Any]]:
    return [FunctionTool(ledger, name="ledger", args_type=LedgerArgs,
                         description="records its execution, waits, returns tag(inputs)")]


@dataclass
class Execution:
    """One execution of a step: its ledger lines."""

    run_id: str
    step_id: int
    attempt: int
    delivery: int
    executor: str
    pid: int
    task: int
    started: float = 0.0
    """Unix time its tool started (0 in a ledger of the older form)."""
    ended: float | None = None
    """Unix time its tool returned; None: it never did (its process died or was stopped
    for good, or its step was cancelled)."""
    idempotency_key: str = NO_KEY

    @property
    def key(self) -> tuple[str, int, int, int, int]:
        """One delivery of one task: it must run once. (One attempt may be carried by two
        tasks after a planner takeover or a publish whose acknowledgement was lost.)"""
        return self.run_id, self.step_id, self.attempt, self.task, self.delivery

    @property
    def attempt_key(self) -> tuple[str, int, int]:
        return self.run_id, self.step_id, self.attempt


def read_ledger(test_dir: Path) -> list[Execution]:
    """Every execution, in the order they started."""
    path = test_dir / LEDGER
    if not path.exists():
        return []
    found: list[Execution] = []
    # executions whose end line has not come yet, by what their lines share
    running: dict[tuple[str, str, int, int], list[Execution]] = defaultdict(list)
    for line in path.read_text().splitlines():
        key, executor, pid, task, *rest = line.split()
        event, at, ikey = rest if len(rest) == 3 else ("start", "0", NO_KEY)
        run_id, step, attempt, delivery = key.rsplit("/", 3)
        ident = (key, executor, int(pid), int(task))
        if event == "end":
            if running[ident]:
                running[ident].pop(0).ended = float(at)
            continue
        execution = Execution(run_id, int(step), int(attempt), int(delivery), executor,
                              int(pid), int(task), float(at), None, ikey)
        found.append(execution)
        running[ident].append(execution)
    return found


def repeated(executions: list[Execution]) -> dict[tuple[str, int, int, int, int], int]:
    """Deliveries executed more than once: (run, step, attempt, task, delivery) → count."""
    counts = Counter(e.key for e in executions)
    return {key: n for key, n in counts.items() if n > 1}


def redelivered(executions: list[Execution]) -> dict[tuple[str, int, int], int]:
    """Attempts executed more than once (a redelivery, or a second task): → count."""
    counts = Counter(e.attempt_key for e in executions)
    return {key: n for key, n in counts.items() if n > 1}


@dataclass
class Repeats:
    """Executions of an attempt beyond its first, by why they happened."""

    of_finished: dict[str, list[str]] = field(default_factory=dict)
    """(a) ``run/step/attempt`` → its executions that started after the attempt had
    finished (its result recorded): a step's side effects done again; must be empty."""
    of_interrupted: int = 0
    """(b) Executions that started while no execution of the attempt had finished: its
    executor died, was stopped or cut off mid-execution (at-least-once, unavoidable)."""
    ended_unrecorded: int = 0
    """Of (b): those after an execution whose tool had returned but whose executor was
    stopped before it could record the result."""
    keys_differ: list[str] = field(default_factory=list)
    """``run/step/attempt`` whose executions saw different idempotency keys; must be empty."""
    keys_checked: int = 0
    """Attempts run more than once whose executions all carried a key (0: the runtime
    gives tools none, nothing to check)."""
    finished_from: str = "records"
    """What "finished" was read from: ``records`` (the time each attempt's result was
    recorded, from the deployment's finished stream) or ``ledger`` (the tool's end line:
    stricter, for a runtime that keeps no records)."""


def classify(executions: list[Execution],
             recorded_at: dict[tuple[str, int, int], float] | None) -> Repeats:
    """Split the repeats of each attempt into (a) and (b) (``Repeats``); ``recorded_at``:
    when each attempt's result was recorded (None: the runtime keeps no records, so an
    execution counts as finished when its tool returned)."""
    found = Repeats(finished_from="ledger" if recorded_at is None else "records")
    by_attempt: dict[tuple[str, int, int], list[Execution]] = defaultdict(list)
    for e in executions:
        by_attempt[e.attempt_key].append(e)
    for attempt, runs in by_attempt.items():
        if len(runs) < 2:
            continue
        name = "/".join(map(str, attempt))
        runs.sort(key=lambda e: e.started)
        keys = {e.idempotency_key for e in runs}
        if NO_KEY not in keys:
            found.keys_checked += 1
            if len(keys) > 1:
                found.keys_differ.append(name)
        for i, e in enumerate(runs[1:], start=1):
            ended = [r.ended for r in runs[:i] if r.ended is not None and r.ended <= e.started]
            if recorded_at is None:
                finished = bool(ended)
            else:
                at = recorded_at.get(attempt)
                finished = at is not None and at <= e.started
            if finished:
                found.of_finished.setdefault(name, []).append(
                    f"{e.executor} pid {e.pid} task {e.task} delivery {e.delivery} at "
                    f"{e.started:.3f}")
            else:
                found.of_interrupted += 1
                found.ended_unrecorded += bool(ended)
    return found
