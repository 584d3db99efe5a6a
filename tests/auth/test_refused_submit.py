"""A user who may not submit runs is told so at once, naming the user and the subject.

The server drops a publish its user may not make and says so only to that connection (an
``-ERR`` nats-py hands to the error callback): the request would otherwise wait for an
answer that never comes and end in "no planner answered ... may still start".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from protocols import Verb, subject
from runtime.testing import Rule, Scenario, open_scripted_model_server

from ..actors.harness import echo, finish, make_team
from ..secured import secured_server
from ..subprocesses import plancast

pytestmark = pytest.mark.anyio


async def test_submitting_as_the_watcher_names_the_permission(tmp_path: Path,
                                                              prefix: str) -> None:
    rules = [Rule(role="planner", lines=[echo(1, "hello")]), finish("done")]
    async with open_scripted_model_server(Scenario(rules=rules)) as model, \
            secured_server(tmp_path, prefix, make_team(model.base_url)) as secured, \
            secured.serving(["planner"]):  # a planner listens: only the permission stops it
        result = await plancast(
            "run", "--nats", secured.server.url, "--prefix", prefix,
            "--creds", str(secured.path("watcher")), "hello", cwd=tmp_path)
    lines = result.stderr.decode().strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, lines
    submit_subject = subject(prefix, Verb.RUN_SUBMIT)
    assert f"NATS user 'watcher' may not publish to {submit_subject}" in lines[0], lines
    assert "plancast auth init" in lines[0]
