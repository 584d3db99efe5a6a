"""What ``plancast run``, ``watch`` and ``runs`` print in a terminal 80 columns wide: every
column whole, and text from the run (the goal, step titles and outputs, errors, the
answer) shown as it was written, never read as markup. Real child processes, a real
nats-server, the scripted model server."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from runtime.config import Settings
from runtime.testing import Rule, Scenario, open_scripted_model_server
from runtime.tools import builtin_tools
from runtime.worker import open_deployment

from ..actors.harness import echo, finish, make_team, plan_line
from ..subprocesses import clean_env, plancast, stderr_tail

pytestmark = pytest.mark.anyio

HOSTILE = "[/x] [bold] [link=https://e.com]x[/link] [/INST] [timeouts]"
"""Markup rich would read (``[/x]`` as an error that took the whole view down)."""
GOAL = f"greet {HOSTILE}"
ANSWER = f"hello {HOSTILE}"
OUTPUTS = ["[/x] [bold]", "[link=https://e.com]x[/link]", "[/INST] [timeouts]"]
RULES = [
    # The first plan names a tool that does not exist: a note with the error, then a replan.
    Rule(role="planner", contains="Goal: greet", times=1,
         lines=[plan_line(1, tool="[/x]", args={})]),
    Rule(role="planner", contains="Goal: greet",
         lines=[echo(1, OUTPUTS[0], title="[bold] first"), echo(2, OUTPUTS[1]),
                echo(3, OUTPUTS[2], title="last [/x]", depends_on=[1, 2])]),
    Rule(role="planner", contains="Goal: fail",
         lines=[plan_line(1, tool="[/x] [bold] [timeouts]", args={})]),
    finish(ANSWER),
]


def flat(result: subprocess.CompletedProcess[bytes]) -> str:
    """The output with its line breaks and runs of spaces made one space (text wraps)."""
    return " ".join(result.stdout.decode().split())


def assert_fits_80_columns(result: subprocess.CompletedProcess[bytes]) -> None:
    text = result.stdout.decode()
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert re.search(r"┃ # ┃ role +┃ step +┃ state +┃ took +┃ output +┃", text), text
    for number, output in enumerate(OUTPUTS, start=1):  # the number, the state, the output
        assert re.search(rf"│ {number} │ worker +│.*│ done +│ \d+\.\d\ds │ "
                         rf"{re.escape(output)} +│", text), text


async def test_run_and_watch_show_markup_as_written_at_80_columns(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """``run`` of a goal holding markup, whose plan is rejected once and whose steps and
    answer hold markup; then ``watch`` of the finished run and ``runs``: no crash, whole
    columns, every string as written."""
    env = clean_env(COLUMNS="80")
    connect = ("--nats", nats_url, "--prefix", prefix)
    async with open_scripted_model_server(Scenario(rules=RULES)) as model:
        settings = Settings(nats_url=nats_url, prefix=prefix)
        async with open_deployment(settings, make_team(model.base_url),
                                   builtin_tools(plugins=False)):
            ran = await plancast("run", *connect, GOAL, cwd=tmp_path, env=env)
            assert ran.returncode == 0, stderr_tail(ran) + ran.stdout.decode()
            found = re.search(r"(run-[0-9a-f]+): greet", ran.stdout.decode())
            assert found, ran.stdout.decode()
            watched = await plancast("watch", *connect, found[1], cwd=tmp_path, env=env)
            listed = await plancast("runs", *connect, cwd=tmp_path, env=env)

    for result in (ran, watched):
        assert result.returncode == 0, stderr_tail(result) + result.stdout.decode()
        assert result.stderr == b"", stderr_tail(result)
        assert_fits_80_columns(result)
        shown = flat(result)
        assert f"{found[1]}: {GOAL}" in shown
        assert "plan rejected: step 1: unknown tool '[/x]'" in shown
        assert "[bold] first" in shown and "last [/x]" in shown
        assert f"answer: {ANSWER}" in shown

    assert listed.returncode == 0, stderr_tail(listed)
    text = listed.stdout.decode()
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert re.search(r"┃ run +┃ goal +┃ status +┃ steps +┃ tokens +┃ age +┃", text), text
    assert re.search(rf"│ {found[1]} │ greet \[/x\] \[bold\]", text), text


async def test_a_failed_runs_error_is_shown_as_written(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """A run that fails with markup in its error (``[timeouts]``, ``[/x]``): the reason is
    printed whole, exit 1; a usage error quoting markup is one line, as written."""
    env = clean_env(COLUMNS="80")
    connect = ("--nats", nats_url, "--prefix", prefix)
    async with open_scripted_model_server(Scenario(rules=RULES)) as model:
        settings = Settings(nats_url=nats_url, prefix=prefix)
        async with open_deployment(settings, make_team(model.base_url),
                                   builtin_tools(plugins=False)):
            failed = await plancast("run", *connect, "fail [/x]", cwd=tmp_path, env=env)
            missing = await plancast("run", *connect, "--plan", "[/x]/[bold].json",
                                     cwd=tmp_path, env=env)
    assert failed.returncode == 1, stderr_tail(failed) + failed.stdout.decode()
    shown = flat(failed)
    assert ": fail [/x]" in shown
    assert ("run failed (plan): the plan was invalid 2 time(s); last error: step 1: "
            "unknown tool '[/x] [bold] [timeouts]'") in shown
    assert missing.returncode == 2
    assert "[/x]/[bold].json" in missing.stderr.decode(), stderr_tail(missing)
