"""The planner: takes runs on, owns each one's DAG, and routes what comes back to it."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence

import anyio
from anyio.abc import TaskGroup, TaskStatus

from protocols import (
    Message,
    ReplanRequest,
    RunAccepted,
    RunRequest,
    StepClaimed,
    StepResult,
    Stream,
    SynthesisDecision,
    Verb,
    Verdict,
    subject,
)
from runtime.actor import Source, Subscription, WorkQueue, on
from runtime.delivery import Delivery
from runtime.role import RoleActor, RoleContext

from .run import Run

log = logging.getLogger(__name__)

RESULT_TYPES = (StepClaimed, StepResult, Verdict, SynthesisDecision, ReplanRequest)


def new_run_id() -> str:
    return f"run-{secrets.token_hex(6)}"


class Planner(RoleActor):
    """Answers ``<prefix>.run.submit``; pulls ``<prefix>.result.>`` for the runs it owns."""

    role = "planner"

    def __init__(self, ctx: RoleContext, *, instance: str | None = None) -> None:
        # Handlers are short (a run is a task of its own), so many may be in hand at once.
        super().__init__(ctx, instance=instance, concurrency=max(ctx.role.concurrency, 256))
        self.runs: dict[str, Run] = {}
        self._runs_tg: TaskGroup | None = None

    def sources(self) -> Sequence[Source]:
        return [
            Subscription(self.bus.subject(Verb.RUN_SUBMIT), queue="planner",
                         accepts=(RunRequest,)),
            WorkQueue(Stream.RESULTS, subject(self.bus.prefix, Verb.RESULT, wildcard=True),
                      "planner", accepts=RESULT_TYPES),
        ]

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as runs:
            self._runs_tg = runs
            await super().serve(task_status=task_status)
            runs.cancel_scope.cancel()

    @on(RunRequest)
    async def submit(self, request: RunRequest, delivery: Delivery) -> None:
        run_id = request.run_id or new_run_id()
        accepted = RunAccepted(run_id=run_id,
                               events_subject=self.bus.subject(Verb.EVENT, run_id))
        if run_id not in self.runs:
            run = self.runs[run_id] = Run(self, run_id, request)
            assert self._runs_tg is not None
            self._runs_tg.start_soon(self._drive, run)
        await delivery.respond(accepted)

    async def _drive(self, run: Run) -> None:
        try:
            await run.drive()
        finally:
            self.runs.pop(run.run_id, None)

    @on(*RESULT_TYPES)
    async def outcome(self, message: Message, delivery: Delivery) -> None:
        run = self.runs.get(message.run_id)  # type: ignore[attr-defined]
        if run is None:
            log.info("%s for run %s, which this planner does not own; ignored",
                     type(message).__name__, message.run_id)  # type: ignore[attr-defined]
            return
        await run.receive(message)
