"""The team lead: a ``team`` role's steps are done by a sub-team, as a child run.

It pulls ``<prefix>.step.<role>`` like an executor and claims the step; then it submits a
child run (an ordinary RunRequest, planned by any planner) whose plans may use only the
role's ``members``, with its ``planner_prompt`` as the planner's brief and its own replan
budget. It holds the parent's step while the child runs (its heartbeats list the step,
JetStream is told the task is in progress) and answers with the child's answer, or its
final failure. Every wait ends: the child's end, the parent giving the step up (a failed
attempt, a replan that dropped it, the parent run's end: the child is cancelled), or the
step's timeout (the child is cancelled, the step fails saying so).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup

from protocols import (
    ParentStep,
    ReplanStarted,
    RunCancel,
    RunFailed,
    RunFinished,
    RunRequest,
    RunStarted,
    StepClaimed,
    StepDispatched,
    StepFailed,
    StepFinished,
    StepResult,
    StepTask,
    Usage,
    Verb,
    cancel_id,
    child_run_id,
)
from runtime.actor import on
from runtime.bus import Delivery
from runtime.client import RunNotAccepted, follow, submit

from .executor import StepRole

log = logging.getLogger(__name__)

MARGIN = 0.1
"""Share of the step's time kept back from the child run, so the child's own deadline
fails it (with its reason) before the parent's planner times the step out."""
TIMER_SLACK = 1.5
"""Seconds more kept back: a planner checks deadlines about once a second."""
SUBMIT_WAIT = 30.0
"""Seconds the child run's submission may take (within the step's time)."""
GOAL_LIMIT = 20_000
"""A child goal's size limit (the RunRequest's)."""


@dataclass
class _Wait:
    """What ended the wait for a child run: a result to send, or nothing (given up)."""

    outcome: dict[str, Any] | None = None
    gave_up: str = ""
    """Why the parent no longer wants the step (then no result is sent)."""
    usage: Usage = field(default_factory=Usage)


class TeamLead(StepRole):
    """Pulls ``<prefix>.step.<role>``; answers on ``<prefix>.result.<run_id>.<role>``."""

    role = "team"

    @on(StepTask)
    async def delegate(self, task: StepTask, delivery: Delivery) -> None:
        if self.too_late(task):
            return
        me = f"{self.name}/{self.instance}"
        key = f"{task.run_id}/{task.step.id}/{task.attempt}/{delivery.stream_seq}" \
              f"/{delivery.deliveries}"
        results = self.bus.subject(Verb.RESULT, task.run_id, self.name)
        claim = await self.bus.publish_soon(results, StepClaimed(
            run_id=task.run_id, step_id=task.step.id, attempt=task.attempt, executor=me,
            delivery=delivery.deliveries, heartbeat=self.settings.heartbeat_interval,
            nonce=task.nonce),
            msg_id=f"{key}/{task.nonce}/claim")
        started = time.time()
        wait = await self._lead(task)
        await self.bus.settle([claim])
        if wait.outcome is None:
            log.info("run %s step %d: %s; no result is sent", task.run_id, task.step.id,
                     wait.gave_up)
            return
        result = StepResult(run_id=task.run_id, step_id=task.step.id, attempt=task.attempt,
                            usage=wait.usage, started_at=started, finished_at=time.time(),
                            executor=me, delivery=delivery.deliveries, nonce=task.nonce,
                            **wait.outcome)
        await self.bus.publish_durable(results, result, msg_id=f"{key}/{task.nonce}/result")

    async def _lead(self, task: StepTask) -> _Wait:
        """Start the child run and wait for its end, the parent's giving up, or the time."""
        step, team = task.step, self.ctx.team
        parent_depth = await self._depth(task.run_id)
        if parent_depth is None:
            return _Wait(gave_up=f"run {task.run_id} has no events (they were removed)")
        depth = parent_depth + 1
        if depth > team.max_team_depth:
            return _Wait(outcome=_failed(
                f"step {step.id} would start a sub-team run at depth {depth}, past "
                f"max_team_depth = {team.max_team_depth} (team file): plan it for an "
                "executor role, or raise max_team_depth", retryable=False))
        limit = task.timeout or team.step_timeout(step.role, None)
        if task.deadline:
            limit = min(limit, task.deadline - time.time())
        child = child_run_id(task.run_id, step.id, task.attempt)
        request = RunRequest(
            goal=child_goal(task), run_id=child, max_replans=self.config.max_replans,
            max_steps=self.config.max_steps,
            timeout=max(limit * (1 - MARGIN) - TIMER_SLACK, limit / 2, 0.1),
            parent=ParentStep(run_id=task.run_id, step_id=step.id, attempt=task.attempt,
                              depth=depth, role=self.name),
            roles=list(self.config.members), planner_prompt=self.config.planner_prompt,
            synthesizer=self.config.synthesizer)
        wait = _Wait()
        with anyio.move_on_after(max(limit * (1 - MARGIN / 2), 0.1)) as deadline:
            try:
                await submit(self.bus, request, timeout=min(SUBMIT_WAIT, limit))
            except RunNotAccepted as exc:
                return _Wait(outcome=_failed(f"the sub-team's run {child} was not taken on: "
                                             f"{exc}", retryable=True))
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._follow_child, child, wait, tg)
                tg.start_soon(self._follow_parent, task, wait, tg)
        if deadline.cancelled_caught:
            wait.outcome = _failed(
                f"timed out: the sub-team's run {child} did not end within the step's "
                f"{limit:g}s (raise step_timeout for role {step.role!r}); it is cancelled")
        if wait.gave_up or deadline.cancelled_caught:
            await self._cancel(child, wait.gave_up or "the step timed out")
        return wait

    async def _follow_child(self, child: str, wait: _Wait, tg: TaskGroup) -> None:
        async for event in follow(self.bus, child):
            if isinstance(event, RunFinished):
                wait.outcome, wait.usage = {"ok": True, "output": event.answer}, event.usage
            elif isinstance(event, RunFailed):
                wait.usage = event.usage
                why = event.cause or event.stage
                wait.outcome = _failed(f"the sub-team's run {child} failed ({why}): "
                                       f"{event.reason}", retryable=False)
        tg.cancel_scope.cancel()

    async def _follow_parent(self, task: StepTask, wait: _Wait, tg: TaskGroup) -> None:
        """Watch the parent run from this attempt's dispatch on: an end of the attempt that
        is not our result means nobody wants it any more."""
        sid, attempt, ours = task.step.id, task.attempt, False
        async for event in follow(self.bus, task.run_id):
            if isinstance(event, RunFinished | RunFailed):
                wait.gave_up = "the parent run ended"
            elif isinstance(event, StepDispatched) and (event.step_id, event.attempt) == \
                    (sid, attempt):
                ours = True
            elif not ours:
                continue
            elif isinstance(event, StepFailed | StepFinished) and \
                    (event.step_id, event.attempt) == (sid, attempt):
                wait.gave_up = f"the parent run ended attempt {attempt} of step {sid}"
            elif isinstance(event, ReplanStarted):
                wait.gave_up = f"the parent run replanned (round {event.round}) without it"
            if wait.gave_up:
                tg.cancel_scope.cancel()
                return

    async def _cancel(self, child: str, reason: str) -> None:
        """Ask the child's planner to stop it (a child that has ended is not changed)."""
        cancel = RunCancel(run_id=child, reason=reason, source=f"{self.name}/{self.instance}")
        with anyio.CancelScope(shield=True), anyio.move_on_after(SUBMIT_WAIT):
            try:
                await self.bus.publish_durable(self.bus.subject(Verb.RESULT, child, self.name),
                                               cancel, msg_id=cancel_id(child))
            except Exception as exc:
                log.warning("could not cancel sub-team run %s (%s); it ends by its own "
                            "deadline", child, exc)

    async def _depth(self, run_id: str) -> int | None:
        """The parent run's depth in the tree (0: a top-level run), from its first event,
        ``run.started`` (a role reads no run state); None if it has none."""
        with anyio.move_on_after(SUBMIT_WAIT):
            async for event in follow(self.bus, run_id, until_end=False):
                if not isinstance(event, RunStarted):
                    break
                return event.parent.depth if event.parent is not None else 0
        return None


def _failed(error: str, *, retryable: bool = True) -> dict[str, Any]:
    return {"ok": False, "error": error, "retryable": retryable}


def child_goal(task: StepTask) -> str:
    """The sub-team's goal: the step's instruction, with the larger goal and the outputs of
    the steps it builds on as context."""
    parts = [task.step.instruction or task.step.title or f"step {task.step.id}",
             f"(This is one part of a larger goal: {task.goal[:2000]})"]
    for sid, output in sorted(task.inputs.items()):
        parts.append(f"Result of earlier step {sid}:\n{output[:4000]}")
    if task.feedback:
        parts.append(f"A critic rejected the previous answer: {task.feedback[:2000]}")
    return "\n\n".join(parts)[:GOAL_LIMIT]
