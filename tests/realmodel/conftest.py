"""The real local model (SmolLM2-135M on llama.cpp, the ``local`` extra): one server for
the session, started by the launcher ``plancast local-model`` uses.

Without the extra these tests skip, saying how to install it; CI installs it.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from protocols import RunEvent, RunRequest
from runtime.client import follow, submit
from runtime.config import Settings, TeamConfig, team_from_dict
from runtime.models import INSTALL_HINT, LlamaServer, missing_packages
from runtime.tools import builtin_tools
from runtime.worker import open_deployment

from ..actors.harness import check_sequence
from ..subprocesses import ROOT

MISSING = missing_packages()
requires_local = pytest.mark.skipif(
    bool(MISSING), reason=f"needs the local extra ({', '.join(MISSING)} missing): {INSTALL_HINT}")
"""Skips a test where the local model server cannot run."""


@pytest.fixture(scope="session")
def local_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """One llama.cpp server with the shipped SmolLM2 for the session."""
    if MISSING:
        pytest.skip(f"needs the local extra ({', '.join(MISSING)} missing): {INSTALL_HINT}")
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with LlamaServer(log_path=log) as server:
        yield server


TEAM_FILE = ROOT / "examples" / "local_model" / "team.toml"
RUN_TIMEOUT = 240.0
"""A guard against a hung run; a run on the 135M model takes seconds."""


def local_team(base_url: str, **changes: Any) -> TeamConfig:
    """The example team (examples/local_model/team.toml) on the session's server, with
    ``changes`` on top of the file (``roles``, ``files_root`` ...)."""
    data = tomllib.loads(TEAM_FILE.read_text())
    for preset in data["models"].values():
        preset["base_url"] = base_url
    roles = changes.pop("roles", None)
    if roles is not None:
        data["roles"] = {name: role for name, role in data["roles"].items()
                         if role.get("kind") in ("planner", "synthesizer")} | roles
    return team_from_dict({**data, **changes}, source=str(TEAM_FILE))


def file_role(name: str) -> dict[str, Any]:
    """A role of the example team file, as its table."""
    role: dict[str, Any] = tomllib.loads(TEAM_FILE.read_text())["roles"][name]
    return role


async def run_goal(nats_url: str, prefix: str, team: TeamConfig, goal: str,
                   **request: Any) -> list[RunEvent]:
    """Every event of one run of ``goal`` by ``team``, served in this process."""
    settings = Settings(nats_url=nats_url, prefix=prefix)
    tools = builtin_tools(files_root=team.files_root, sandbox=team.sandbox, plugins=False)
    async with open_deployment(settings, team, tools) as bus:
        accepted = await submit(bus, RunRequest(goal=goal, **request))
        with anyio.fail_after(RUN_TIMEOUT):
            events = [event async for event in follow(bus, accepted.run_id)]
    check_sequence(events)
    return events
