"""The record of an executor role's finished attempts: a result is written down before its
task is acknowledged, so a task of that attempt that comes again (a redelivery after a lost
acknowledgement, a takeover's re-send, a second copy of the task) gets the same outcome
sent again instead of a second execution of the step's side effects.

One subject per attempt, ``finished.<role>.<run_id>.<step>.<attempt>`` of the finished
stream, which keeps its last message. An execution begins by writing its claim there,
expecting the subject's last message to be the one it read (none at first): the stream's
leader decides, so a record written a moment ago is never missed, as a read from a replica
that lags could miss it. If a record of the finished attempt is there, the attempt is not
run again; if the claim of an earlier execution is there (it was interrupted), this one
takes over. The result is then written over its own claim, again expecting it last: when
two executions of one attempt race, the first written is the attempt's outcome, and the
other sends that outcome. The stream keeps records as long as the runs' events, within the
storage limit, in the deployment's replicas (``runtime.bus.provisioning``); each role's
user may write and read only its own role's (``runtime.bus.auth``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import anyio
import msgspec

from protocols import (
    UNREADABLE,
    StepClaimed,
    StepResult,
    StepStop,
    StepTask,
    Stream,
    Verb,
    decode,
    object_space,
    stream_name,
)
from runtime.bus import EXPECT_SEQ, RETRY_CAP, TRANSIENT, Bus, Fenced, NotFoundError
from runtime.nonces import Nonces

log = logging.getLogger(__name__)

MISSING: tuple[type[Exception], ...] = (NotFoundError, *TRANSIENT)
"""Why a replica may not give what its leader holds this moment."""
RESULT_ID = "Plancast-Result-Id"
"""The header of a record naming the message id its result was sent under (a task that
comes again answers with the record under an id of its own delivery: under this one the
results stream would drop it as a duplicate of an answer that may not have counted)."""


@dataclass(frozen=True)
class Recorded:
    """A finished attempt's result and the message id it travels under."""

    result: StepResult
    msg_id: str


@dataclass(frozen=True)
class Begun:
    """This execution's claim is the attempt's last word: it runs the step."""

    seq: int
    """The claim's sequence: the result is written expecting it still last."""


@dataclass(frozen=True)
class _Last:
    seq: int
    result: StepResult | None
    """The record of the finished attempt (None: a claim, or something unreadable)."""
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

    async def begin(self, task: StepTask, claim: StepClaimed, key: str) -> Recorded | Begun:
        """The attempt's record if it finished already; else this execution's claim
        written as the attempt's last word (``key`` names this execution)."""
        subject, expected = self.subject(task), 0
        while True:
            try:
                seq = await self.bus.publish_durable(
                    subject, claim, msg_id=f"{key}/{task.nonce}/started/{expected}",
                    headers={EXPECT_SEQ: str(expected)})
                return Begun(seq)
            except Fenced:  # something came after what we expected: read it
                last = await self._last_after(task, subject, expected)
            if last.result is not None:
                return Recorded(last.result, last.msg_id)
            expected = last.seq  # an interrupted execution's claim: this one takes over

    async def record(self, task: StepTask, result: StepResult, msg_id: str,
                     begun: Begun) -> Recorded:
        """Write the attempt's result down over this execution's claim, and return what to
        send: ours, or, if another execution of the attempt was recorded first, its
        outcome in our result (sent as ours: the planner counts a result only from the
        claimant of its delivery, and after a takeover that lost the other's dispatch it
        may know only ours)."""
        subject, expected = self.subject(task), begun.seq
        while True:
            try:
                await self.bus.publish_durable(subject, result, msg_id=f"{msg_id}/finished",
                                               headers={EXPECT_SEQ: str(expected),
                                                        RESULT_ID: msg_id})
                return Recorded(result, msg_id)
            except Fenced:
                last = await self._last_after(task, subject, expected)
            if last.result is not None:
                log.info("%s: another execution of this attempt was recorded first: its "
                         "outcome is sent", subject)
                first = last.result
                return Recorded(msgspec.structs.replace(
                    result, ok=first.ok, output=first.output, output_ref=first.output_ref,
                    error=first.error, retryable=first.retryable), msg_id)
            expected = last.seq  # a later execution's claim (it began while we were away)

    async def _last_after(self, task: StepTask, subject: str, after: int) -> _Last:
        """The subject's last message, which the leader says is past ``after``: asked of
        the replicas until one that has it answers (retried through failovers for as long
        as a publish is)."""
        delay, deadline = 0.05, anyio.current_time() + self.bus.settings.publish_retry_for
        while True:
            try:
                raw = await self.bus.js.get_msg(self._stream, subject=subject, direct=True)
                if int(raw.seq or 0) > after:
                    return await self._read(task, subject, int(raw.seq or 0), raw.data or b"",
                                            raw.headers or {})
                why = f"sequence {raw.seq}, not past {after}"
            except MISSING as exc:
                why = f"{type(exc).__name__}: {exc}"
            if anyio.current_time() + delay > deadline:
                raise TimeoutError(f"{subject}: the record the stream's leader holds was "
                                   f"not read back ({why})")
            log.info("reading %s: a replica behind (%s); asking again in %.2fs", subject,
                     why, delay)
            await anyio.sleep(delay)
            delay = min(delay * 2, RETRY_CAP)

    async def _read(self, task: StepTask, subject: str, seq: int, data: bytes,
                    headers: dict[str, str]) -> _Last:
        try:
            message = decode(await self.bus.resolve(
                data, space=object_space(self.bus.prefix, subject)), StepResult | StepClaimed)
        except UNREADABLE as exc:
            log.warning("%s: unreadable record (%s); taken as an interrupted execution's",
                        subject, exc)
            return _Last(seq, None, "")
        if not isinstance(message, StepResult):
            return _Last(seq, None, "")  # the claim of an execution that did not finish
        if message.nonce != task.nonce or message.run_id != task.run_id \
                or message.step_id != task.step.id or message.attempt != task.attempt:
            log.warning("%s: a record that is not of this task (its nonce or its step "
                        "differ); the step runs", subject)
            return _Last(seq, None, "")
        return _Last(seq, message, headers.get(RESULT_ID) or f"{subject}/result")


class InHand:
    """The executions of one process still running or recording: a task of an attempt this
    process already runs (delivered again while its record waits out a failover) waits for
    that execution's record instead of running the step a second time; an attempt its
    planner gave up is stopped (``StepStop``)."""

    def __init__(self) -> None:
        self._running: dict[tuple[str, int, int], _Running] = {}

    def running(self, task: StepTask) -> _Running | None:
        return self._running.get(_attempt(task))

    def start(self, task: StepTask) -> _Running:
        running = self._running[_attempt(task)] = _Running(task.nonce)
        return running

    def stop(self, stop: StepStop) -> bool:
        """Cancel the execution of the attempt ``stop`` names, if it runs here and the stop
        carries its task's nonce; whether one was stopped."""
        running = self._running.get((stop.run_id, stop.step_id, stop.attempt))
        if running is None or running.scope is None \
                or not Nonces.same(stop.nonce, running.nonce):
            return False
        running.stopped = stop.reason or "its planner gave it up"
        running.scope.cancel()
        return True

    def end(self, task: StepTask, running: _Running, recorded: Recorded | None) -> None:
        running.recorded = recorded
        running.done.set()
        if self._running.get(_attempt(task)) is running:
            del self._running[_attempt(task)]


class _Running:
    def __init__(self, nonce: str) -> None:
        self.nonce = nonce
        self.done = anyio.Event()
        self.recorded: Recorded | None = None
        """Its record, once written (None: it failed before)."""
        self.scope: anyio.CancelScope | None = None
        """Around the execution itself (not its record): cancelled by a stop."""
        self.stopped = ""
        """Why it was stopped, if it was."""


def _attempt(task: StepTask) -> tuple[str, int, int]:
    return task.run_id, task.step.id, task.attempt

