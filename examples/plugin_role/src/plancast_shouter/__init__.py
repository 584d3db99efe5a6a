"""plancast-shouter: an example third-party role that repeats its inputs in capitals.

Registered by this package's ``pyproject.toml``::

    [project.entry-points."plancast.roles"]
    shouter = "plancast_shouter:Shouter"
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from protocols import Message, StepClaimed, StepResult, StepTask, Stream, Verb
from runtime import Delivery, RoleActor, WorkQueue, on

__all__ = ["Shouter"]


class Shouter(RoleActor):
    """Pulls ``<prefix>.step.<role>``; answers each step with its inputs upper-cased."""

    role = "shouter"

    def sources(self) -> Sequence[WorkQueue]:
        # One durable consumer per role name: every instance of the role shares the work.
        return [WorkQueue(Stream.WORK, self.bus.subject(Verb.STEP, self.name),
                          f"step-{self.name}")]

    def describe(self, message: Message) -> str:
        assert isinstance(message, StepTask)
        return f"{message.run_id}/{message.step.id}"

    @on(StepTask)
    async def shout(self, task: StepTask, delivery: Delivery) -> None:
        me = f"{self.name}/{self.instance}"
        results = self.bus.subject(Verb.RESULT, task.run_id, self.name)
        # The id of this execution: a redelivered task gets a new one. The task's nonce
        # keeps anyone else from publishing first under it, and every answer repeats it:
        # the planner counts an answer only with the nonce of the task it names.
        key = f"{task.run_id}/{task.step.id}/{task.attempt}/{delivery.deliveries}/{task.nonce}"
        await self.bus.publish_durable(results, StepClaimed(
            run_id=task.run_id, step_id=task.step.id, attempt=task.attempt, executor=me,
            delivery=delivery.deliveries, nonce=task.nonce), msg_id=f"{key}/claim")
        started = time.time()
        # Outputs of the steps this one depends on, in step order; else the instruction.
        text = "\n".join(task.inputs[i] for i in sorted(task.inputs))
        output = (text or task.step.instruction or "").upper()
        await self.bus.publish_durable(results, StepResult(
            run_id=task.run_id, step_id=task.step.id, attempt=task.attempt, ok=True,
            output=output, started_at=started, finished_at=time.time(), executor=me,
            delivery=delivery.deliveries,  # a result counts only with its own claim
            nonce=task.nonce), msg_id=f"{key}/result")
        # Returning acknowledges the task: the result is stored, so nothing is lost.
