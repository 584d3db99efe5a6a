"""Every wait of a run has a deadline; this is where they are kept.

A step attempt fails when it runs past its start-to-close timeout, when the executor that
claimed it stops listing it in its heartbeats, or when no live process serves its role;
a review and a synthesis have timeouts of their own, and so may the whole run. Passing
one is a ``step.failed`` event (the attempt is retried or replanned like any failure) or
a ``run.failed`` one, with a reason that says which deadline and what to do.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import anyio

from protocols import Step, Stream
from runtime.bus import Fenced
from runtime.dag import StepState

from ._api import RunOps
from .state import RunFailure, StepMeta
from .steps import forget, step_failed

log = logging.getLogger(__name__)

TICK = 1.0
"""Longest pause between two checks of a run's clocks (shorter with short timeouts)."""


@dataclass(frozen=True)
class Expired:
    """A step attempt whose deadline passed."""

    step: Step
    attempt: int
    cause: str
    error: str
    retry: bool


async def watch(run: RunOps) -> None:
    """Check the run's clocks until the run ends (run beside ``Run.drive``)."""
    timeouts = run.env.team.timeouts
    tick = max(0.05, min(TICK, timeouts.heartbeat / 4, timeouts.unserved / 4))
    while run.record.status == "active":
        await anyio.sleep(tick)
        try:
            await check(run)
        except Fenced:
            run.scope.cancel()
            return
        except Exception as exc:  # a bus hiccup: look again at the next tick
            log.warning("run %s: checking its deadlines failed: %s", run.run_id, exc)


async def check(run: RunOps) -> None:
    now, timeouts = time.time(), run.env.team.timeouts
    if run.record.deadline and now > run.record.deadline:
        allowed = run.record.deadline - run.record.started_at
        run.abort(RunFailure("runtime", f"the run did not end within its {allowed:g}s "
                             "timeout (RunRequest.timeout or [timeouts] run)", "deadline"))
        return
    if run.synthesis_since:
        waited = now - run.synthesis_since
        if waited > timeouts.synthesis:
            run.abort(RunFailure("synthesize", f"the synthesizer gave no decision within "
                                 f"{timeouts.synthesis:g}s ([timeouts] synthesis)",
                                 "synthesis_timeout"))
            return
        named = run.request.synthesizer  # a sub-team's run may name its synthesizer
        why = await _unserved(run, "synthesizer", f"synthesis-{named}" if named else "synthesis",
                              run.synthesis_since, role=named or None)
        if why:
            run.abort(RunFailure("synthesize", why, "unserved"))
            return
    expired: list[Expired] = []
    async with run.lock:
        if run.record.status != "active" or run.events.closed:
            return
        for step in run.scheduler.steps:
            if run.state_of(step.id) is StepState.RUNNING \
                    and not run.told_outcome(step.id, run.scheduler.attempt(step.id)):
                found = await _expired(run, step, run.meta[step.id], now)
                if found is not None:
                    expired.append(found)
        for e in expired:
            log.warning("run %s: step %d attempt %d: %s", run.run_id, e.step.id, e.attempt,
                        e.error)
            await forget(run, [e.step.id], e.error)
            await step_failed(run, e.step, e.attempt, e.error, e.retry, e.cause)
        closed_too_long = await _expire_gates(run, now)
    if expired or closed_too_long:
        await run.save()


async def _expire_gates(run: RunOps, now: float) -> bool:
    """Fail the attempts whose gate stayed closed past ``[timeouts] approval`` (the caller
    holds the lock); True if any did."""
    late = [(sid, attempt) for sid, (attempt, deadline) in run.gates.items() if now > deadline]
    for sid, attempt in late:
        del run.gates[sid]
        await step_failed(
            run, run.scheduler.step(sid), attempt, f"nobody approved attempt {attempt} of "
            f"step {sid} within {run.env.team.timeouts.approval:g}s ([timeouts] approval); "
            f"approve it sooner (`plancast plan approve {run.run_id} --step {sid}`) or raise "
            "the timeout", False, "approval")
    return bool(late)


async def _expired(run: RunOps, step: Step, meta: StepMeta, now: float) -> Expired | None:
    timeouts, attempt = run.env.team.timeouts, run.scheduler.attempt(step.id)
    retry = attempt < run.env.team.step_attempts

    def expired(cause: str, error: str, again: bool = retry) -> Expired:
        return Expired(step, attempt, cause, error, again)

    if meta.review_output is not None:
        if now - meta.review_sent_at > timeouts.review:
            return expired("review_timeout", f"the critic gave no verdict within "
                           f"{timeouts.review:g}s ([timeouts] review)")
        why = await _unserved(run, "critic", "review", meta.review_sent_at)
        return expired("unserved", why, False) if why else None
    if not meta.claimants:
        if meta.unclaimed_at and now - meta.unclaimed_at > timeouts.claim:
            return expired("not_claimed", f"not claimed: a result of attempt {attempt} came "
                           f"{now - meta.unclaimed_at:.0f}s ago from a process that never "
                           f"claimed it, and no claim followed within {timeouts.claim:g}s "
                           "([timeouts] claim); the attempt is run again")
        late = await _not_claimed(run, step, meta, now)
        if late:
            return expired("not_claimed", late)
        why = await _unserved(run, None, f"step-{step.role}", meta.dispatched_at, step.role)
        return expired("unserved", why, False) if why else None
    limit = run.env.team.step_timeout(step.role, step.timeout)
    running = now - meta.claimed_at
    if running > limit + min(30.0, max(2.0, limit / 10)):  # the executor's own answer first
        return expired("timeout", f"timed out: attempt {attempt} ran {running:.0f}s, past "
                       f"its {limit:g}s start-to-close timeout (set step_timeout under "
                       f"[roles.{step.role}], or timeout on the step)")
    liveness = run.env.liveness
    if liveness.listening(run.env.bus.settings.heartbeat_interval):
        silent = liveness.reporting(meta.executor, f"{run.run_id}/{step.id}", meta.claimed_at,
                                    meta.beats)
        if silent is not None and silent > timeouts.heartbeat:
            return expired("heartbeat", f"{meta.executor} stopped reporting attempt "
                           f"{attempt}: no heartbeat listed it for {silent:.0f}s (heartbeat "
                           f"timeout {timeouts.heartbeat:g}s); it died, hung or dropped it")
    return None


async def _not_claimed(run: RunOps, step: Step, meta: StepMeta, now: float) -> str:
    """Why the attempt fails for want of a claim, or "": its task was handed to a process
    (the consumer delivered past it) ``[timeouts] claim`` seconds ago and nobody claimed it.
    A heartbeat listing the step shows it in hand meanwhile (a claim still on its way)."""
    wait = run.env.team.timeouts.claim
    if not meta.task_seq or now - meta.dispatched_at <= wait:
        return ""
    if not meta.delivered_at:
        consumer = f"step-{step.role}"
        if await run.env.liveness.delivered(Stream.WORK, consumer) < meta.task_seq:
            return ""  # still queued: the unserved deadline watches that
        meta.delivered_at = now
    liveness = run.env.liveness
    held = liveness.listed(step.role, f"{run.run_id}/{step.id}")
    listening = time.monotonic() - liveness.since()  # we were deaf before: nothing is known
    since = max(meta.delivered_at, now - held if held is not None else 0.0, now - listening)
    if now - since <= wait \
            and now - meta.delivered_at <= run.env.team.step_timeout(step.role, step.timeout):
        return ""
    if await liveness.backlog(Stream.RESULTS, f"run-{run.run_id}"):
        return ""  # its claim may be among the outcomes not applied yet
    return (f"not claimed: its task was delivered to a {step.role!r} process "
            f"{now - meta.delivered_at:.0f}s ago and no step.claimed came within {wait:g}s "
            "([timeouts] claim); the executor acknowledged the task without claiming it, "
            "or died holding it")


async def _unserved(run: RunOps, kind: str | None, consumer: str, since: float,
                    role: str | None = None) -> str:
    """Why nobody will do this work (no live instance for ``[timeouts] unserved``), or "".

    ``role`` names an executor role; else the team's roles of ``kind`` serve it.
    """
    wait = run.env.team.timeouts.unserved
    if time.time() - since <= wait:
        return ""
    roles = [role] if role is not None else run.env.team.kind_roles(kind or "")
    liveness = run.env.liveness
    if liveness.live(roles) or liveness.silent_for(roles) <= wait:
        return ""
    if await liveness.consumer_active(Stream.WORK, consumer):
        return ""  # a worker that sends no heartbeats is pulling this work
    what = f"role {role!r}" if role is not None else f"{kind} ({', '.join(roles) or 'none'})"
    if not roles:
        return (f"the team has no {kind} role, so nobody can do this; add one to the team "
                "file")
    return (f"no live process serves {what}: no heartbeat and nothing pulling {consumer} for "
            f"{liveness.silent_for(roles):.0f}s; start one with `plancast worker --role "
            f"{roles[0]}` (with --nats pointing at this deployment)")
