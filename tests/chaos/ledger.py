"""The ``ledger`` tool: every execution of a step leaves one line, and a known output.

Each call appends ``<run>/<step>/<attempt>/<delivery> <executor> <pid> <task>`` to
``$PLANCAST_TEST_DIR/chaos-ledger.txt`` (one short ``O_APPEND`` write, so lines from
many processes never interleave), sleeps ``sleep`` seconds and returns
``ledger_output(tag, inputs)``, which the workload computes ahead to check answers.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import msgspec

from runtime.tools import FunctionTool, current_step

LEDGER = "chaos-ledger.txt"
LONG = 120
"""Inputs longer than this are summarised by a digest, so outputs stay short."""


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
    line = (f"{ctx.run_id}/{ctx.step_id}/{ctx.attempt}/{ctx.delivery} {ctx.executor} "
            f"{os.getpid()} {task}\n")
    fd = os.open(Path(os.environ["PLANCAST_TEST_DIR"]) / LEDGER,
                 os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    await anyio.sleep(args.sleep)
    return ledger_output(args.tag, args.inputs)


def chaos_tools() -> list[FunctionTool[Any]]:
    return [FunctionTool(ledger, name="ledger", args_type=LedgerArgs,
                         description="records its execution, waits, returns tag(inputs)")]


@dataclass(frozen=True)
class Execution:
    """One line of the ledger."""

    run_id: str
    step_id: int
    attempt: int
    delivery: int
    executor: str
    pid: int
    task: int

    @property
    def key(self) -> tuple[str, int, int, int, int]:
        """One delivery of one task: it must run once. (One attempt may be carried by two
        tasks after a planner takeover or a publish whose acknowledgement was lost.)"""
        return self.run_id, self.step_id, self.attempt, self.task, self.delivery


def read_ledger(test_dir: Path) -> list[Execution]:
    path = test_dir / LEDGER
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        key, executor, pid, task = line.split()
        run_id, step, attempt, delivery = key.rsplit("/", 3)
        found.append(Execution(run_id, int(step), int(attempt), int(delivery), executor,
                               int(pid), int(task)))
    return found


def repeated(executions: list[Execution]) -> dict[tuple[str, int, int, int, int], int]:
    """Deliveries executed more than once: (run, step, attempt, task, delivery) → count."""
    counts = Counter(e.key for e in executions)
    return {key: n for key, n in counts.items() if n > 1}


def redelivered(executions: list[Execution]) -> dict[tuple[str, int, int], int]:
    """Attempts executed more than once (a redelivery, or a second task): → count."""
    counts = Counter(e.key[:3] for e in executions)
    return {key: n for key, n in counts.items() if n > 1}
