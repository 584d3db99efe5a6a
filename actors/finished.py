"""The record of an executor role's finished attempts: a result is written down before its
task is acknowledged, so a task of that attempt that comes again (a redelivery after a lost
acknowledgement, a takeover's re-send, a second copy of the task) gets the same result
sent again instead of a second execution of the step's side effects.

One record per attempt, on ``finished.<role>.<run_id>.<step>.<attempt>`` of the finished
stream, written once (a publish that expects no message on the subject yet): when two
executions of one attempt race, the first recorded is the attempt's result, and the other
sends that one. The stream keeps records as long as the runs' events, within the storage
limit, in the deployment's replicas (``runtime.bus.provisioning``); each role's user may
write and read only its own role's (``runtime.bus.auth``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import anyio
import msgspec

from protocols import (
    UNREADABLE,
    StepResult,
    StepTask,
    Stream,
    Verb,
    decode,
    object_space,
    stream_name,
)
from runtime.bus import EXPECT_SEQ, RETRY_CAP, TRANSIENT, Bus, Fenced, NotFoundError

log = logging.getLogger(__name__)

RESULT_ID = "Plancast-Result-Id"
"""The header of a record naming the message id its result was sent under: sent again
under the same id, the results stream drops it if the first one is still remembered."""


@dataclass(frozen=True)
class Recorded:
    """A finished attempt's result and the message id it travels under."""

    result: StepResult
    msg_id: str


class FinishedSteps:
    """The records of the attempts of one executor role."""

    def __init__(self, bus: Bus, role: str) -> None:
        self.bus = bus
        self.role = role
        self._stream = stream_name(bus.prefix, Stream.FINISHED)

    def subject(self, task: StepTask) -> str:
        return self.bus.subject(Verb.FINISHED, self.role, task.run_id, str(task.step.id),
                                str(task.attempt))

    async def lookup(self, task: StepTask) -> Recorded | None:
        """The attempt's record, if it finished already (retried through failovers for as
        long as a publish is: not knowing is no reason to run a step twice)."""
        subject = self.subject(task)
        delay, deadline = 0.05, anyio.current_time() + self.bus.settings.publish_retry_for
        while True:
            try:
                raw = await self.bus.js.get_msg(self._stream, subject=subject, direct=True)
                break
            except NotFoundError:
                return None
            except TRANSIENT as exc:
                if anyio.current_time() + delay > deadline:
                    raise
                log.info("reading %s failed (%s); retrying in %.2fs", subject, exc, delay)
                await anyio.sleep(delay)
                delay = min(delay * 2, RETRY_CAP)
        return await self._read(task, subject, raw.data or b"", raw.headers or {})

    async def record(self, task: StepTask, result: StepResult, msg_id: str) -> Recorded:
        """Write the attempt's result down, once, and return what to send: ours, or, if
        another execution of the attempt was recorded first, its outcome in our result
        (sent as ours: the planner counts a result only from the claimant of its delivery,
        and it may know only ours, after a takeover that lost the other's dispatch)."""
        subject = self.subject(task)
        try:
            await self.bus.publish_durable(subject, result, msg_id=f"{msg_id}/finished",
                                           headers={EXPECT_SEQ: "0", RESULT_ID: msg_id})
        except Fenced:  # recorded already: the attempt's outcome is that one
            earlier = await self.lookup(task)
            if earlier is not None:
                log.info("%s: another execution of this attempt was recorded first: its "
                         "outcome is sent", subject)
                first = earlier.result
                result = msgspec.structs.replace(
                    result, ok=first.ok, output=first.output, output_ref=first.output_ref,
                    error=first.error, retryable=first.retryable)
        return Recorded(result, msg_id)

    async def _read(self, task: StepTask, subject: str, data: bytes,
                    headers: dict[str, str]) -> Recorded | None:
        try:
            result = decode(await self.bus.resolve(
                data, space=object_space(self.bus.prefix, subject)), StepResult)
        except UNREADABLE as exc:
            log.warning("%s: unreadable record (%s); the step runs", subject, exc)
            return None
        if result.nonce != task.nonce or result.run_id != task.run_id \
                or result.step_id != task.step.id or result.attempt != task.attempt:
            log.warning("%s: a record that is not of this task (its nonce or its step "
                        "differ); the step runs", subject)
            return None
        return Recorded(result, headers.get(RESULT_ID) or f"{subject}/result")


class InHand:
    """The executions of one process still running or recording: a task of an attempt this
    process already runs (delivered again while its record waits out a failover) waits for
    that execution's record instead of running the step a second time."""

    def __init__(self) -> None:
        self._running: dict[tuple[str, int, int], _Running] = {}

    def running(self, task: StepTask) -> _Running | None:
        return self._running.get(_attempt(task))

    def start(self, task: StepTask) -> _Running:
        running = self._running[_attempt(task)] = _Running()
        return running

    def end(self, task: StepTask, running: _Running, recorded: Recorded | None) -> None:
        running.recorded = recorded
        running.done.set()
        if self._running.get(_attempt(task)) is running:
            del self._running[_attempt(task)]


class _Running:
    def __init__(self) -> None:
        self.done = anyio.Event()
        self.recorded: Recorded | None = None
        """Its record, once written (None: it failed before)."""


def _attempt(task: StepTask) -> tuple[str, int, int]:
    return task.run_id, task.step.id, task.attempt

