"""The supervisor role: work that cannot be done becomes a replan; silence is reported.

It reads every dead letter (work an actor gave up on) and JetStream's max-deliveries
advisories (work whose executors kept dying), and tells the run's planner which step
could not be done. It watches heartbeats and reports actors that fall silent; their
unacknowledged work is redelivered to the others once its ack wait runs out.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import ClassVar

import anyio
from anyio.abc import TaskStatus

from protocols import (
    ActorError,
    Heartbeat,
    InvalidSubjectToken,
    Message,
    ReplanRequest,
    ReviewTask,
    StepTask,
    Stream,
    SynthesisTask,
    Verb,
    object_space,
    stream_name,
    subject,
)
from runtime.actor import RoleActor, RoleContext, Source, Subscription, WorkQueue, on
from runtime.bus import Delivery
from runtime.config import RoleOption

log = logging.getLogger(__name__)

WORK_TYPES = (StepTask, ReviewTask, SynthesisTask)
SILENT_AFTER = 3
"""Heartbeat intervals of silence after which an actor is reported."""


class SupervisorActor(RoleActor):
    """Consumes ``<prefix>.dead.>`` and heartbeats; answers with replan requests."""

    role = "supervisor"
    role_options: ClassVar[Mapping[str, RoleOption]] = MappingProxyType({})

    def __init__(self, ctx: RoleContext, *, instance: str | None = None) -> None:
        # Heartbeats are many and tiny: never queue them behind a dead letter.
        super().__init__(ctx, instance=instance, concurrency=max(ctx.role.concurrency, 16))
        self.seen: dict[str, Heartbeat] = {}
        """The last heartbeat of every actor, by ``role/instance``."""
        self._reported: set[str] = set()

    def sources(self) -> Sequence[Source]:
        return [
            WorkQueue(Stream.DEAD, subject(self.bus.prefix, Verb.DEAD, wildcard=True),
                      "supervisor", accepts=WORK_TYPES),
            Subscription(subject(self.bus.prefix, Verb.HEARTBEAT, "*", "*", wildcard=True),
                         accepts=(Heartbeat,)),
        ]

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(self._advisories)
            tg.start_soon(self._watch_silence)
            await super().serve(task_status=task_status)
            tg.cancel_scope.cancel()

    async def refuse(self, delivery: Delivery, reason: str) -> None:
        """Dead letters that are not work (garbage kept for inspection) need nothing more:
        never delivered again (they stay in the stream for inspection)."""
        log.debug("dead letter on %s is not work: %s", delivery.subject, reason[:200])
        await delivery.term()

    @on(*WORK_TYPES)
    async def dead_work(self, task: Message, delivery: Delivery) -> None:
        sender = delivery.subject.rsplit(".", 1)[-1]  # dead.<role>: only its user writes it
        if sender != self.name and sender not in self._roles_of(task):
            log.warning("a dead %s on %s is not %s's work: ignored", type(task).__name__,
                        delivery.subject, sender)
            await self._report(ActorError(
                role=self.name, instance=self.instance, subject=delivery.subject,
                reason=f"a dead letter from {sender!r} holds work of another role; a role "
                       "gives up only its own work, so it changes nothing", ts=time.time()))
            return
        why = delivery.headers.get("Plancast-Reason", "it was dead-lettered")
        match task:
            case StepTask():
                request = ReplanRequest(
                    run_id=task.run_id, source="supervisor", failed_step=task.step.id,
                    work="step", attempt=task.attempt, nonce=task.nonce,
                    reason=f"step {task.step.id} (attempt {task.attempt}) could not be run: {why}")
            case ReviewTask():
                request = ReplanRequest(
                    run_id=task.run_id, source="supervisor", failed_step=task.step.id,
                    work="review", attempt=task.attempt, nonce=task.nonce,
                    reason=f"the review of step {task.step.id} could not be done: {why}")
            case _:
                assert isinstance(task, SynthesisTask)
                request = ReplanRequest(run_id=task.run_id, source="supervisor",
                                        work="synthesis", nonce=task.nonce,
                                        reason=f"the synthesis could not be done: {why}")
        log.warning("run %s: %s", request.run_id, request.reason)
        await self.bus.publish_durable(
            self.bus.subject(Verb.RESULT, request.run_id, self.name), request,
            msg_id=f"{request.run_id}/dead/{hashlib.sha256(delivery.data).hexdigest()[:20]}")

    def _roles_of(self, task: Message) -> list[str]:
        """The roles whose actors may give this task up (their dead letters count)."""
        match task:
            case StepTask():
                return [task.step.role]
            case ReviewTask():
                return self.ctx.team.senders("critic")
            case _:
                return self.ctx.team.senders("synthesizer")

    def offload_space(self, delivery: Delivery) -> str | None:
        """A dead letter holds a task as it came: its object is in the space of the
        subject the task came on (a task of another role is ignored once decoded)."""
        try:
            return object_space(self.bus.prefix, delivery.headers.get("Plancast-Subject", ""))
        except InvalidSubjectToken:
            return None

    @on(Heartbeat)
    async def beat(self, beat: Heartbeat, delivery: Delivery) -> None:
        key = f"{beat.role}/{beat.instance}"
        self.seen[key] = beat
        self._reported.discard(key)

    async def _watch_silence(self) -> None:
        while True:
            await anyio.sleep(self.settings.heartbeat_interval)
            now = time.time()
            for key, beat in list(self.seen.items()):
                silent = now - beat.ts
                if beat.draining or silent < SILENT_AFTER * beat.interval:
                    continue
                if key not in self._reported:
                    self._reported.add(key)
                    await self._report(ActorError(
                        role=beat.role, instance=beat.instance, subject=delivery_subject(beat),
                        reason=f"silent for {silent:.1f}s (heartbeat every {beat.interval:g}s); "
                               f"its unacknowledged work ({', '.join(beat.in_flight) or 'none'}) "
                               "is redelivered once its ack wait runs out", ts=now))
                if silent > 20 * beat.interval:
                    del self.seen[key]

    async def _advisories(self, *, task_status: TaskStatus[None]) -> None:
        """Work whose deliveries ran out (its executors kept dying) goes to the dead letters."""
        work = stream_name(self.bus.prefix, Stream.WORK)
        sub = await self.bus.nc.subscribe(
            f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{work}.*")
        task_status.started()
        async for msg in sub.messages:
            try:
                advisory = json.loads(msg.data)
                stored = await self.bus.js.get_msg(work, advisory["stream_seq"])
                await self.bus.js.publish(
                    self.bus.subject(Verb.DEAD, "supervisor"), stored.data or b"",
                    headers={"Plancast-Subject": stored.subject,
                             "Plancast-Reason": f"delivered {advisory.get('deliveries')} "
                                                "times without an outcome"})
                await self.bus.js.delete_msg(work, advisory["stream_seq"])
            except Exception as exc:  # an advisory we cannot act on must not stop the watch
                log.warning("max-deliveries advisory not handled: %s", exc)


def delivery_subject(beat: Heartbeat) -> str:
    return f"heartbeat.{beat.role}.{beat.instance}"
