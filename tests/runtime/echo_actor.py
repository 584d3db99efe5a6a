"""A small actor for runtime tests: echoes step tasks back as results, fails on request."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio

from protocols import RunAccepted, RunRequest, StepResult, StepTask, Stream, Verb
from runtime.actor import Actor, Source, Subscription, WorkQueue, on
from runtime.bus import Delivery


class EchoActor(Actor):
    """``step.echo`` tasks come back on ``result.<run>``; goals steer its behaviour:
    ``boom`` raises, ``sleep:<s>`` takes that long."""

    role = "echo"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.working = anyio.Event()
        """Set when a step task is in hand, so tests wait on it instead of polling."""

    def sources(self) -> Sequence[Source]:
        return [
            WorkQueue(
                Stream.WORK, self.bus.subject(Verb.STEP, "echo"), "step-echo", accepts=(StepTask,)
            ),
            Subscription(self.bus.subject(Verb.RUN_SUBMIT), queue="echo", accepts=(RunRequest,)),
        ]

    @on(StepTask)
    async def step(self, task: StepTask, delivery: Delivery) -> None:
        self.working.set()
        if task.goal == "boom":
            raise RuntimeError("the tool exploded")
        if task.goal.startswith("sleep:"):
            await anyio.sleep(float(task.goal.split(":", 1)[1]))
        result = StepResult(
            run_id=task.run_id,
            step_id=task.step.id,
            attempt=task.attempt,
            ok=True,
            output=task.goal,
            executor=f"{self.name}/{self.instance}",
        )
        await self.bus.publish_durable(
            self.bus.subject(Verb.RESULT, task.run_id, self.name),
            result,
            msg_id=f"{task.run_id}/{task.step.id}/{task.attempt}",
        )

    @on(RunRequest)
    async def submit(self, request: RunRequest, delivery: Delivery) -> None:
        await delivery.respond(RunAccepted(run_id=request.run_id or "r-echo", events_subject="x"))
