"""Per-role NATS users on a real server: each role can do its job and nothing else.

The server enforces the grants of ``runtime.bus.auth``: the pipeline runs with one user per
role, and what a role (or a watcher, an outsider with read rights) must not do is denied
by the server itself: forged decisions and verdicts, replan requests, injected tasks,
writes to the run state, events published ahead of the planner, deleting streams.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from protocols import RunFinished, RunRequest, Stream, runs_bucket, stream_name
from runtime.bus import NatsUnreachable, open_bus
from runtime.client import follow, plan_of_run, store_plan, stored_plan, stored_plans, submit
from runtime.config import Settings, TeamConfig
from runtime.testing import Rule, Scenario, open_scripted_model_server
from runtime.tools import builtin_tools
from runtime.worker import open_deployment

from ..actors.harness import echo, finish, make_team
from ..secured import Secured, secured_server

pytestmark = pytest.mark.anyio

ROLES = {"critic": {"kind": "critic", "model": "scripted"},
         "supervisor": {"kind": "supervisor"}}


@pytest.fixture
async def secured(tmp_path: Path, prefix: str) -> AsyncIterator[Secured]:
    async with open_scripted_model_server(Scenario(rules=[
            Rule(role="planner", lines=[echo(1, "hello")]), finish("done")])) as model:
        async with secured_server(tmp_path, prefix, make_team(model.base_url, ROLES)) as s:
            yield s


async def test_the_pipeline_runs_with_one_user_per_role(secured: Secured) -> None:
    async with secured.serving(list(secured.team.roles)):
        async with open_bus(secured.settings("client")) as client:
            accepted = await submit(client, RunRequest(goal="hi"))
            with anyio.fail_after(60):
                events = [e async for e in follow(client, accepted.run_id)]
            # The client keeps the run's plan by name; the watcher may list it too.
            await store_plan(client, "hi", await plan_of_run(client, accepted.run_id))
            assert [s.id for s in (await stored_plan(client, "hi")).steps]
        async with open_bus(secured.settings("watcher")) as watcher:
            assert [e async for e in follow(watcher, accepted.run_id)] == events
            assert list(await stored_plans(watcher)) == ["hi"]
    assert isinstance(events[-1], RunFinished) and events[-1].answer == "done"
    assert "violation" not in secured.server.log_tail(400).lower()


async def test_a_role_whose_consumer_was_not_provisioned_says_how_to_make_it(
    secured: Secured
) -> None:
    async with open_bus(secured.settings("admin")) as admin:
        await admin.js.delete_consumer(stream_name(secured.prefix, Stream.WORK), "step-worker")
    with pytest.raises(BaseException) as caught, anyio.fail_after(30):
        async with open_deployment(secured.settings("worker"), secured.team,
                                   builtin_tools(plugins=False), roles=["worker"]):
            await anyio.sleep_forever()
    # (The supervisor restarts the actor a few times before it gives up with this line.)
    said = repr(caught.value)
    assert "consumer step-worker does not exist" in said and "run `plancast provision" in said


async def test_a_connection_without_credentials_is_refused(secured: Secured) -> None:
    with pytest.raises(NatsUnreachable, match=r"credentials|authorization"):
        async with open_bus(Settings(nats_url=secured.server.url, prefix=secured.prefix,
                                     connect_timeout=2)):
            pass


def _forbidden(p: str, team: TeamConfig) -> dict[str, list[str]]:
    """What each user tries and the server must deny: ``pub:`` and ``sub:`` subjects."""
    work = stream_name(p, Stream.WORK)
    outsider = [
        f"pub:{p}.result.r1.synthesizer",  # a forged synthesis.decision
        f"pub:{p}.result.r1.critic",  # a forged review.verdict
        f"pub:{p}.result.r1.supervisor",  # a forged run.replan
        f"pub:{p}.step.worker",  # a step.task injected into a role's subject
        f"pub:$KV.{runs_bucket(p)}.runs.r1.steps.77",  # a step record
        f"pub:{p}.event.r1",  # events ahead of the planner
        f"pub:{p}.fence.r1",
        f"pub:{p}.stop.worker",  # stopping another's attempt
        f"pub:{p}.run.submit", f"pub:{p}.run.resubmit",
        f"pub:$JS.API.STREAM.DELETE.{work}",
        f"pub:$JS.API.CONSUMER.CREATE.{work}.x",
        "sub:_INBOX.>", "sub:_INBOX_planner.>", f"sub:{p}.run.submit",
        f"sub:{p}.run.resubmit",
    ]
    return {
        "watcher": outsider,
        "worker": [
            f"pub:{p}.event.r1",  # a plan, or any event
            f"pub:{p}.run.submit", f"pub:{p}.step.worker", f"pub:{p}.review",
            f"pub:{p}.result.r1.synthesizer", f"pub:{p}.result.r1.critic",
            f"pub:$KV.{runs_bucket(p)}.runs.r1",
            f"pub:$JS.API.STREAM.DELETE.{work}", f"pub:$JS.API.STREAM.PURGE.{work}",
            f"pub:$JS.API.CONSUMER.CREATE.{work}.x", f"pub:$JS.API.CONSUMER.DELETE.{work}.x",
            f"pub:$JS.API.CONSUMER.MSG.NEXT.{work}.review", f"pub:$JS.ACK.{work}.review.x",
            f"sub:{p}.event.>", "sub:_INBOX_critic.>",
            f"sub:{p}.error.critic",  # its own error subject only
            f"pub:{p}.error.critic",  # nor speak for another role there
            f"pub:{p}.stop.worker",  # only a planner stops an attempt
            f"sub:{p}.stop.researcher",  # and only the role running it hears that
        ],
        "critic": [f"pub:{p}.result.r1.synthesizer", f"pub:{p}.result.r1.worker",
                   f"pub:$JS.API.CONSUMER.MSG.NEXT.{work}.step-worker",
                   f"pub:{p}.stop.worker", f"sub:{p}.stop.worker"],
        "synthesizer": [f"pub:{p}.result.r1.critic", f"pub:{p}.event.r1"],
        "client": [f"pub:{p}.result.r1.synthesizer", f"pub:{p}.step.worker",
                   f"pub:{p}.event.r1", f"pub:$JS.API.STREAM.DELETE.{work}"],
    }


async def test_each_user_is_denied_what_its_role_must_not_do(secured: Secured) -> None:
    for user, attempts in _forbidden(secured.prefix, secured.team).items():
        for attempt in attempts:
            kind, _, subj = attempt.partition(":")
            errors: list[str] = []
            seen = anyio.Event()
            nc = await secured.connect(user, errors, seen)
            try:
                if kind == "pub":
                    await nc.publish(subj, b'{"type": "synthesis.decision"}')
                else:
                    await nc.subscribe(subj)
                await nc.flush()
                with anyio.fail_after(5):
                    await seen.wait()
            finally:
                await nc.close()
            assert any("permissions violation" in e and subj.lower() in e for e in errors), \
                (user, attempt, errors)
    # The server logs each denial: the pipeline test's "no violation" means something.
    assert "violation" in secured.server.log_tail(400).lower()
