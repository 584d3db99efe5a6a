"""The executor: runs the steps of one role, any number of instances sharing the work.

A tool step calls its tool directly with no model call (as LLMCompiler does); an agent
step runs the role's model with only the tools both the step and the role allow. A
finished step's result is recorded before it is sent and its task acknowledged, and a
task of an attempt recorded as finished gets that result again, not a second execution
(``actors.finished``); but not a step whose tool has no effect on the world (``effects =
"none"``): running it again harms nothing, so nothing is recorded.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar

import anyio
import msgspec
from anyio.abc import TaskStatus

from actors.finished import Begun, FinishedSteps, InHand, Recorded
from actors.outbox import Outbox
from protocols import (
    UNREADABLE,
    Message,
    StepClaimed,
    StepResult,
    StepStop,
    StepTask,
    Stream,
    Verb,
    decode,
    encode,
    object_space,
)
from runtime import telemetry
from runtime.actor import RoleActor, RoleContext, Source, WorkQueue, on
from runtime.agent import Spent, run_agent
from runtime.bus import Delivery, StorageFull
from runtime.config import RoleOption
from runtime.errors import PlancastError, SetupError
from runtime.tools import (
    StepContext,
    Tool,
    ToolArgumentsError,
    UnknownTool,
    attempt_key,
    check_hook,
    current_step,
)

from . import prompts

log = logging.getLogger(__name__)

PERMANENT = (UnknownTool, ToolArgumentsError)
"""Failures another attempt cannot fix."""


class StepRefused(PlancastError):
    """The step asks for something this role may not do."""


class StepRole(RoleActor):
    """A role that pulls the steps given to it from ``<prefix>.step.<role>``."""

    def sources(self) -> Sequence[Source]:
        return [WorkQueue(Stream.WORK, self.bus.subject(Verb.STEP, self.name), f"step-{self.name}")]

    def describe(self, message: Message) -> str:
        assert isinstance(message, StepTask)
        return f"{message.run_id}/{message.step.id}"

    def too_late(self, task: StepTask) -> bool:
        """The run's deadline passed: its planner has ended it, nobody wants this result."""
        if task.deadline and time.time() > task.deadline:
            log.info("%s: skipping step %d of run %s: the run's deadline passed", self.name,
                     task.step.id, task.run_id)
            return True
        return False


class Executor(StepRole):
    """Runs its role's steps; answers on ``<prefix>.result.<run_id>.<role>``."""

    role = "executor"
    role_options: ClassVar[Mapping[str, RoleOption]] = MappingProxyType({})

    def __init__(self, ctx: RoleContext, *, instance: str | None = None) -> None:
        super().__init__(ctx, instance=instance)
        self.outbox = Outbox(self.bus)
        """Claims and results of one moment go to their run as one message."""
        self.finished = FinishedSteps(self.bus, self.name)
        """The attempts this role finished, each with its result."""
        self.in_hand = InHand()
        """The attempts this process runs or records right now."""

    @on(StepTask)
    async def run_step(self, task: StepTask, delivery: Delivery) -> None:
        if self.too_late(task):
            return
        results = self.bus.subject(Verb.RESULT, task.run_id, self.name)
        ctx = self._context(task, delivery)
        claim = StepClaimed(run_id=task.run_id, step_id=task.step.id, attempt=task.attempt,
                            executor=ctx.executor, delivery=ctx.delivery,
                            heartbeat=self.settings.heartbeat_interval, nonce=task.nonce)
        # A step with no effect on the world has nothing to record first (``None``).
        begun = None if task.effects == "none" else await self._begin(task, ctx, claim)
        if isinstance(begun, Recorded):  # it ran to its end before: its result again
            log.info("%s: step %d attempt %d of run %s finished already (%s): its result "
                     "is sent again, the step is not run again", self.name, task.step.id,
                     task.attempt, task.run_id, begun.result.executor)
            done = _as_ours(begun, claim, f"{ctx.key}/{task.nonce}/result")
        else:
            running, recorded = self.in_hand.start(task), None
            try:
                with anyio.CancelScope() as running.scope:
                    result, msg_id = await self._run(task, delivery, ctx, claim, results)
                if running.stopped:  # its planner gave it up: nobody wants an answer
                    log.info("%s: stopped step %d attempt %d of run %s: %s", self.name,
                             task.step.id, task.attempt, task.run_id, running.stopped)
                    return
                running.scope = None  # a stop that comes while it is recorded is too late
                done = recorded = await self._unrecorded(task, result, msg_id) \
                    if begun is None else await self._record(task, result, msg_id, begun)
            finally:
                self.in_hand.end(task, running, recorded)
        await self._send_result(results, done)

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve the role's steps, hearing the planners' stops of attempts they gave up."""
        stops = await self.bus.nc.subscribe(self.bus.subject(Verb.STOP, self.name),
                                            cb=self._heard_stop)
        try:
            await super().serve(task_status=task_status)
        finally:
            with anyio.CancelScope(shield=True):
                await stops.unsubscribe()

    async def _heard_stop(self, msg: Any) -> None:
        try:
            stop = decode(msg.data, StepStop)
        except UNREADABLE as exc:
            log.debug("%s: ignoring an unreadable stop (%s)", self.name, exc)
            return
        self.in_hand.stop(stop)

    def _context(self, task: StepTask, delivery: Delivery) -> StepContext:
        """What the step's tools see of it."""
        return StepContext(task.run_id, task.step.id, task.attempt, delivery.deliveries,
                           f"{self.name}/{self.instance}", task=delivery.stream_seq,
                           inputs=task.inputs,
                           idempotency_key=task.idempotency_key or attempt_key(
                               task.run_id, task.step.id, task.attempt, task.nonce))

    async def _begin(self, task: StepTask, ctx: StepContext,
                     claim: StepClaimed) -> Recorded | Begun:
        """The attempt's record if it finished (or finishes now in this process: a task
        delivered again while its first execution here waits to record it); else this
        execution's claim on it (``actors.finished``)."""
        running = self.in_hand.running(task)
        if running is not None:
            await running.done.wait()
            if running.recorded is not None:
                return running.recorded
        return await self.finished.begin(task, claim, ctx.key)

    async def _run(self, task: StepTask, delivery: Delivery, ctx: StepContext,
                   claim: StepClaimed, results: str) -> tuple[StepResult, str]:
        """Execute the step: its result, and the message id it travels under."""
        me = ctx.executor
        started = time.time()
        spent = Spent()  # model calls count even when the step fails after them
        failure: Exception | None = None
        with telemetry.step_span(delivery, task, role=self.name, executor=me) as span:
            late = LateClaim(self, results, claim, f"{ctx.key}/{task.nonce}/claim")
            token = current_step.set(ctx)
            try:
                outcome = await self._outcome(task, span, spent)
            except Exception as exc:
                failure = exc
            finally:
                current_step.reset(token)
                claimed = await late.stop()
        if failure is not None:
            raise failure
        result = StepResult(
            run_id=task.run_id, step_id=task.step.id, attempt=task.attempt, usage=spent.usage,
            started_at=started, finished_at=time.time(), executor=me, delivery=ctx.delivery,
            claims=not claimed, heartbeat=claim.heartbeat if not claimed else 0.0,
            nonce=task.nonce, **outcome,
        )
        # A result counts only from a claimant: a claim sent earlier is stored by now.
        # The id names the task and its delivery: a stale executor's result must not be
        # mistaken for (and de-duplicate away) the result of another execution.
        return result, f"{ctx.key}/{task.nonce}/result"

    async def _record(self, task: StepTask, result: StepResult, msg_id: str,
                      begun: Begun) -> Recorded:
        """Write the finished attempt down before its result goes out and its task is
        acknowledged (``actors.finished``)."""
        try:
            result = await self._by_reference(task, result)
            return await self.finished.record(task, result, msg_id, begun)
        except StorageFull as exc:  # its output is too large to keep: the step fails
            return await self.finished.record(task, _unstorable(result, exc), msg_id, begun)

    async def _unrecorded(self, task: StepTask, result: StepResult, msg_id: str) -> Recorded:
        """What to send for a step whose tool has no effect on the world (``effects =
        "none"``): its result as is, with no record of the finished attempt (running it
        again harms nothing), so two stored messages and a round trip fewer."""
        try:
            return Recorded(await self._by_reference(task, result), msg_id)
        except StorageFull as exc:  # its output is too large to keep: the step fails
            return Recorded(_unstorable(result, exc), msg_id)

    async def _by_reference(self, task: StepTask, result: StepResult) -> StepResult:
        """An output too large for a message is kept once, in the object store under the
        results' space (``output_ref``): the record and the result both carry only the
        reference, so it is not stored twice."""
        output, most = result.output, self.settings.max_message_bytes
        if output is None or len(output) < most // 4 - 1024 or len(encode(result)) <= most:
            return result
        results = self.bus.subject(Verb.RESULT, task.run_id, self.name)
        ref = await self.bus.put_object(object_space(self.bus.prefix, results),
                                        output.encode())
        return msgspec.structs.replace(result, output=None, output_ref=ref)

    async def _send_result(self, results: str, done: Recorded) -> None:
        try:
            await self.outbox.send(results, done.result, msg_id=done.msg_id)
        except StorageFull as exc:  # too large to keep: the step fails, saying why
            await self.bus.publish_durable(results, _unstorable(done.result, exc),
                                           msg_id=done.msg_id)

    async def _outcome(self, task: StepTask, span: telemetry.SpanLike,
                       spent: Spent) -> dict[str, Any]:
        """Run the step within its timeout: the result's fields saying how it went."""
        try:
            # A cancel scope with a deadline is anyio.fail_after without its two generator
            # context managers around it: a twentieth of a quick step's CPU.
            deadline = anyio.current_time() + task.timeout if task.timeout else math.inf
            with anyio.CancelScope(deadline=deadline) as limit:
                output = await self._execute(task, span, spent)
            if limit.cancelled_caught:  # its deadline passed: nothing else cancels it
                raise TimeoutError
        except SetupError:  # a misconfigured model: another attempt or a replan meets it
            raise  # again, so the handler fails and the run ends saying why (Actor base)
        except OutcomeUnknown as exc:
            span.fail("outcome_unknown", str(exc))
            return {"ok": False, "error": str(exc), "retryable": False,
                    "cause": "outcome_unknown"}
        except PlancastError as exc:
            error = f"{type(exc).__name__}: {exc}"
            span.fail(type(exc).__name__, error)
            return {"ok": False, "error": error,
                    "retryable": not isinstance(exc, (*PERMANENT, StepRefused))}
        except TimeoutError:
            error = (f"timed out: the step ran longer than its {task.timeout:g}s timeout "
                     "(raise step_timeout for the role, or timeout on the step)")
            span.fail("timeout", error)
            return {"ok": False, "retryable": True, "error": error, "cause": "timeout"}
        span.content("gen_ai.tool.call.result" if task.step.tool is not None
                      else "gen_ai.output.messages", output)
        return {"ok": True, "output": output}

    async def _execute(self, task: StepTask, span: telemetry.SpanLike, spent: Spent) -> str:
        step = task.step
        if step.tool is not None:
            if step.tool not in self.tools:
                raise StepRefused(
                    f"role {self.name!r} may not use tool {step.tool!r}; its tools: "
                    f"{', '.join(self.tools.names()) or 'none'}"
                )
            if span.capture:
                span.content("gen_ai.tool.call.arguments", msgspec.json.encode(step.args).decode())
            done = await settle_earlier(task, self.tools.get(step.tool))
            if done is not None:
                return done
            return await self.tools.run(step.tool, step.args)
        await settle_earlier(task, None)  # an agent step: no tool to ask
        allowed = self.tools if step.tools is None else self.tools.subset(
            t for t in step.tools if t in self.tools
        )
        outcome = await run_agent(
            self.model,
            [{"role": "system", "content": self.config.system_prompt or prompts.EXECUTOR},
             {"role": "user", "content": prompts.step_request(
                 task.goal, step, task.inputs, task.feedback)}],
            allowed, max_rounds=self.config.max_tool_rounds, span=span, spent=spent,
        )
        return outcome.text


def _as_ours(recorded: Recorded, claim: StepClaimed, msg_id: str) -> Recorded:
    """A finished attempt's recorded outcome as this delivery's own answer, claiming it:
    the planner counts a result only from a claimant of its delivery, and the first answer
    may have been read without counting (a planner that took the run over refused it, its
    step not planned again yet). Sent again under its first id, the results stream would
    drop it as a duplicate and the attempt would wait for an answer that never comes
    (chaos seed 47, run c47-0075); a planner that did count it ignores this one."""
    return Recorded(msgspec.structs.replace(
        recorded.result, executor=claim.executor, delivery=claim.delivery, claims=True,
        heartbeat=claim.heartbeat), msg_id)


def _unstorable(result: StepResult, exc: StorageFull) -> StepResult:
    """The failure a result becomes when its output cannot be stored."""
    return msgspec.structs.replace(result, ok=False, output="", output_ref=None,
                                   retryable=False,
                                   error=f"its output could not be stored: {exc}")


class OutcomeUnknown(PlancastError):
    """A ``once`` step an earlier execution may have done, and nobody can check."""


def unsettled_keys(task: StepTask, delivery: int) -> list[str]:
    """Idempotency keys of earlier executions of a ``once`` step that may have acted: those
    the planner names (interrupted attempts), and this attempt's own when its task is
    delivered again (its first delivery's executor died or stopped holding it)."""
    if task.effects != "once":
        return []
    own = [task.idempotency_key] if delivery > 1 and task.idempotency_key else []
    return [*task.check_keys, *own]


async def settle_earlier(task: StepTask, tool: Tool | None) -> str | None:
    """Before a ``once`` step acts again: the output of an earlier execution that its tool
    says was done, or None if none was (then it runs); OutcomeUnknown if it cannot tell."""
    ctx = current_step.get()
    keys = unsettled_keys(task, ctx.delivery if ctx is not None else 1)
    if not keys:
        return None
    check = check_hook(tool) if tool is not None else None
    if check is None:
        what = f"tool {tool.name!r} has no check hook" if tool is not None \
            else "an agent step cannot be checked"
        raise OutcomeUnknown(
            f"outcome unknown: an earlier execution of this effects = \"once\" step may "
            f"have acted (idempotency key {', '.join(keys)}) and {what}; not run again: a "
            "person must check whether it was done, then replan or rerun the run")
    for key in keys:
        output = await check(key)
        if output is not None:
            log.info("step %d of run %s: done earlier under key %s (its tool's check)",
                     task.step.id, task.run_id, key)
            return output
    return None


class LateClaim:
    """A step's claim, sent once the step has run ``claim_after`` seconds: the planner then
    knows who works on it (and watches that executor's heartbeats). A step that ends
    sooner carries its claim in its result: one message instead of two. A timer, not a
    task: most steps end first, and a task per step cost as much as the rest of its
    handling."""

    def __init__(self, executor: Executor, subject: str, claim: StepClaimed,
                 msg_id: str) -> None:
        self._executor, self._subject, self._claim, self._msg_id = \
            executor, subject, claim, msg_id
        self._sent = False
        self._sending: anyio.Event | None = None
        self._error: BaseException | None = None
        self._timer = asyncio.get_running_loop().call_later(
            executor.settings.claim_after, self._due)

    def _due(self) -> None:
        self._sending = anyio.Event()
        try:
            self._executor.start_soon(self._send)
        except RuntimeError as exc:  # not serving any more: the step's handler hears of it
            self._error = exc
            self._sending.set()

    async def _send(self) -> None:
        assert self._sending is not None
        try:
            await self._executor.outbox.send(self._subject, self._claim, msg_id=self._msg_id)
            self._sent = True
        except Exception as exc:  # the step's handler raises it (and the step is retried)
            self._error = exc
        finally:
            self._sending.set()

    async def stop(self) -> bool:
        """No claim from now on; whether a claim was sent (and stored: once it is, if it
        is being sent)."""
        self._timer.cancel()
        if self._sending is not None:
            await self._sending.wait()
        if self._error is not None:
            raise self._error
        return self._sent
