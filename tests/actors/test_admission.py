"""Admission: a planner takes on at most ``max_active_runs`` submitted runs at once, and
says so to the submitter of one more (a resubmit of a run it has is still "accepted"); a
run another planner holds is answered too, once a cancel sent at once would be kept."""

from __future__ import annotations

import time

import anyio
import pytest

from protocols import (
    RunAccepted,
    RunFailed,
    RunFinished,
    RunRecord,
    RunRejected,
    RunRequest,
    Stream,
    Verb,
    encode,
    new_run_id,
    run_key,
    runs_bucket,
    stream_name,
)
from runtime.bus import NotFoundError
from runtime.client import RunNotAccepted, cancel, follow, submit
from runtime.config import Settings
from runtime.testing import Rule, Scenario, open_scripted_model_server
from runtime.tools import builtin_tools
from runtime.worker import open_deployment

from .harness import RUN_TIMEOUT, finish, make_team, plan_line

pytestmark = pytest.mark.anyio


async def test_a_submit_beyond_max_active_runs_is_rejected_naming_the_limit(
    nats_url: str, prefix: str
) -> None:
    slow = plan_line(1, tool="sleep", args={"seconds": 1.5})
    rules = [Rule(role="planner", lines=[slow]), finish("slept")]
    async with open_scripted_model_server(Scenario(rules=rules)) as model:
        team = make_team(model.base_url, max_active_runs=1)
        settings = Settings(nats_url=nats_url, prefix=prefix)
        async with open_deployment(settings, team, builtin_tools(plugins=False)) as bus:
            first = await submit(bus, RunRequest(goal="one"))
            with pytest.raises(RunNotAccepted, match="max_active_runs"):
                await submit(bus, RunRequest(goal="two"))
            again = await submit(bus, RunRequest(goal="one", run_id=first.run_id))
            assert again.run_id == first.run_id
            with anyio.fail_after(RUN_TIMEOUT):
                events = [e async for e in follow(bus, first.run_id)]
            assert isinstance(events[-1], RunFinished)
            with anyio.fail_after(RUN_TIMEOUT):  # the planner lets go of a run as it ends
                while True:
                    try:
                        second = await submit(bus, RunRequest(goal="two"))
                        break
                    except RunNotAccepted:
                        await anyio.sleep(0.1)
                events = [e async for e in follow(bus, second.run_id)]
            assert isinstance(events[-1], RunFinished)


async def test_a_run_another_planner_holds_is_answered_and_an_early_cancel_is_kept(
    nats_url: str, prefix: str
) -> None:
    """A run stored by a planner that then went silent (cut off, stopped: chaos seed 51)
    is answered by any planner, on the queue group and on the resubmit subject, and only
    once its results consumer is there: the cancel sent at once ends the run when it is
    adopted (the results stream keeps only what a consumer reads)."""
    rules = [Rule(role="planner", lines=[plan_line(1)]), finish("done")]
    async with open_scripted_model_server(Scenario(rules=rules)) as model:
        team = make_team(model.base_url)
        settings = Settings(nats_url=nats_url, prefix=prefix, run_lease=3.0)
        async with open_deployment(settings, team, builtin_tools(plugins=False)) as bus:
            run_id, now = new_run_id(), time.time()
            request = RunRequest(goal="held elsewhere", run_id=run_id)
            kv = await bus.js.key_value(runs_bucket(prefix))
            await kv.create(run_key(run_id), encode(RunRecord(
                run_id=run_id, request=request, owner="silent/1", lease_until=now + 3.0,
                started_at=now)))
            results = stream_name(prefix, Stream.RESULTS)
            for verb in (Verb.RUN_RESUBMIT, Verb.RUN_SUBMIT):
                answer = await bus.request(bus.subject(verb), request,
                                           RunAccepted | RunRejected, timeout=5.0)
                assert isinstance(answer, RunAccepted), answer
                assert answer.run_id == run_id
                await bus.js.consumer_info(results, f"run-{run_id}")  # there before it
            await cancel(bus, run_id, "changed my mind")
            with anyio.fail_after(RUN_TIMEOUT):
                events = [e async for e in follow(bus, run_id)]
            assert isinstance(events[-1], RunFailed), events[-1]
            assert events[-1].cause == "cancelled"
            with anyio.fail_after(RUN_TIMEOUT):  # its driver removes it as the run ends
                while True:
                    try:
                        await bus.js.consumer_info(results, f"run-{run_id}")
                    except NotFoundError:
                        break
                    await anyio.sleep(0.1)
