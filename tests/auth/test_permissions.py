"""Per-role NATS users on a real server: each role can do its job and nothing else.

The server enforces the grants of ``runtime.auth``: the pipeline runs with one user per
role, and what a role (or a watcher, an outsider with read rights) must not do is denied
by the server itself: forged decisions and verdicts, replan requests, injected tasks,
writes to the run state, events published ahead of the planner, deleting streams.
"""

from __future__ import annotations

import tomllib
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import anyio
import nats
import pytest

from protocols import RunFinished, RunRequest, Stream, runs_bucket, stream_name
from runtime.auth import CONF_FILE, write_auth
from runtime.client import follow, submit
from runtime.connection import NatsUnreachable, open_bus
from runtime.embedded import NatsServerProcess
from runtime.process import open_deployment
from runtime.provision import provision_consumers
from runtime.settings import Settings
from runtime.team import TeamConfig
from runtime.testing import Rule, Scenario, open_scripted_model_server
from runtime.tools import builtin_tools

from ..actors.harness import echo, finish, make_team

pytestmark = pytest.mark.anyio

ROLES = {"critic": {"kind": "critic", "model": "scripted"},
         "supervisor": {"kind": "supervisor"}}


@dataclass
class Secured:
    server: NatsServerProcess
    team: TeamConfig
    creds: Path
    prefix: str

    def settings(self, user: str) -> Settings:
        return Settings(nats_url=self.server.url, prefix=self.prefix,
                        creds=self.creds / f"{user}.creds", connect_timeout=3)

    async def connect(self, user: str, errors: list[str], seen: anyio.Event) -> nats.NATS:
        async def on_error(exc: Exception) -> None:
            errors.append(str(exc).lower())
            seen.set()

        creds = tomllib.loads((self.creds / f"{user}.creds").read_text())
        return await nats.connect(self.server.url, user=creds["user"],
                                  password=creds["password"], error_cb=on_error,
                                  inbox_prefix=f"_INBOX_{user}", max_reconnect_attempts=0)


@pytest.fixture
async def secured(tmp_path: Path, prefix: str) -> AsyncIterator[Secured]:
    async with open_scripted_model_server(Scenario(rules=[
            Rule(role="planner", lines=[echo(1, "hello")]), finish("done")])) as model:
        team = make_team(model.base_url, ROLES)
        write_auth(tmp_path / "auth", prefix, team)
        conf = (tmp_path / "auth" / CONF_FILE).read_text()
        with NatsServerProcess(tmp_path / "nats", extra_config=[conf]) as server:
            secured = Secured(server, team, tmp_path / "auth", prefix)
            async with open_bus(secured.settings("admin")) as admin:
                await provision_consumers(admin.js, team, admin.settings)
            yield secured


async def test_the_pipeline_runs_with_one_user_per_role(secured: Secured) -> None:
    async with AsyncExitStack() as stack:
        for role in secured.team.roles:
            await stack.enter_async_context(open_deployment(
                secured.settings(role), secured.team, builtin_tools(plugins=False),
                roles=[role]))
        async with open_bus(secured.settings("client")) as client:
            accepted = await submit(client, RunRequest(goal="hi"))
            with anyio.fail_after(60):
                events = [e async for e in follow(client, accepted.run_id)]
        async with open_bus(secured.settings("watcher")) as watcher:
            assert [e async for e in follow(watcher, accepted.run_id)] == events
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
        f"pub:{p}.run.submit",
        f"pub:$JS.API.STREAM.DELETE.{work}",
        f"pub:$JS.API.CONSUMER.CREATE.{work}.x",
        "sub:_INBOX.>", "sub:_INBOX_planner.>", f"sub:{p}.run.submit",
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
        ],
        "critic": [f"pub:{p}.result.r1.synthesizer", f"pub:{p}.result.r1.worker",
                   f"pub:$JS.API.CONSUMER.MSG.NEXT.{work}.step-worker"],
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
