"""What the examples print for a person: every event described in words, and a reader that
stops early (``| head``) ends the example quietly."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import anyio
import pytest

from protocols import RunRequest
from runtime import Settings, follow, open_deployment, submit
from runtime.testing import Rule, Scenario, open_scripted_model_server
from runtime.tools import builtin_tools

from .actors.harness import RUN_TIMEOUT, echo, finish, make_team
from .subprocesses import PYTHON, clean_env, run, stderr_tail

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

pytestmark = pytest.mark.anyio


async def test_the_subscriber_says_what_happened_for_every_event(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """Not a bare class name (``StepStarted``, ``UsageRecorded``): what happened."""
    rules = [Rule(role="planner", lines=[echo(1, "one"), echo(2, "$1 and two")]),
             finish("one and two")]
    async with open_scripted_model_server(Scenario(rules=rules)) as model:
        settings = Settings(nats_url=nats_url, prefix=prefix)
        async with open_deployment(settings, make_team(model.base_url),
                                   builtin_tools(plugins=False)) as bus:
            accepted = await submit(bus, RunRequest(goal="count"))
            with anyio.fail_after(RUN_TIMEOUT):
                events = [e async for e in follow(bus, accepted.run_id)]
    result = await run(PYTHON, str(EXAMPLES / "subscriber.py"), accepted.run_id, "--nats",
                       nats_url, "--prefix", prefix, cwd=tmp_path)
    assert result.returncode == 0, stderr_tail(result)
    lines = result.stdout.decode().splitlines()
    assert len(lines) == len(events)
    bare = [line for line in lines if re.fullmatch(r"\s*\d+ [A-Z][A-Za-z]+", line)]
    assert not bare, lines
    said = "\n".join(lines)
    assert "run started: count" in said and "step 1 started by " in said, said
    assert re.search(r"used \d+ tokens \(run total \d+\)", said), said


@pytest.mark.parametrize("example", ["hierarchy", "fanout"])
async def test_an_example_ends_quietly_when_its_reader_stops(
    example: str, nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """``python examples/hierarchy/run.py | head -1``: exit 0, nothing on stderr."""
    script = shlex.join([PYTHON, str(EXAMPLES / example / "run.py")])
    result = await run("bash", "-c", f"{script} | head -1; exit ${{PIPESTATUS[0]}}",
                       cwd=tmp_path, env=clean_env(NATS_URL=nats_url, PLANCAST_PREFIX=prefix))
    assert len(result.stdout.decode().splitlines()) == 1, result.stdout
    assert result.returncode == 0 and result.stderr == b"", stderr_tail(result)
