"""The ``plancast`` command as users run it: a real subprocess, its stdout and exit code."""

from __future__ import annotations

import json
import logging
import signal
from pathlib import Path

import anyio
import jsonschema
import msgspec
import pytest

from protocols import (
    PUBLIC_MESSAGES,
    ReplanStarted,
    RunFailed,
    RunFinished,
    RunRequest,
    StepFailed,
    StepFinished,
)
from runtime.actor import RoleContext, UnknownRole, build_actor
from runtime.bus import NatsServerProcess
from runtime.client import follow, submit
from runtime.config import Settings, team_from_dict
from runtime.testing import Rule, Scenario, open_scripted_model_server
from runtime.tools import builtin_tools
from runtime.worker import open_deployment

from ..actors.harness import echo, finish, make_team, plan_line
from ..subprocesses import PLANCAST, SCRIPTED_TEAM, clean_env, events_of, plancast, stderr_tail

GOOD = [echo(1, "hello"), echo(2, "$1, world")]
RULES = [
    Rule(role="planner", contains="Goal: greet", lines=GOOD),
    Rule(role="planner", contains="Goal: break", lines=["no plan today"]),
    finish("hello, world"),
]


# -- run -----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_run_json_hands_the_goal_to_workers_on_nats(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """``plancast run --nats`` submits to the team served here and streams NDJSON events.

    A finished run exits 0 and ends with ``event.run.finished``; a failed one exits 1.
    """
    async with open_scripted_model_server(Scenario(rules=RULES)) as model:
        team = make_team(model.base_url, plan_attempts=1)
        settings = Settings(nats_url=nats_url, prefix=prefix)
        async with open_deployment(settings, team, builtin_tools(plugins=False)):
            ok = await plancast("run", "--json", "--nats", nats_url, "--prefix", prefix,
                                "greet the world", cwd=tmp_path)
            bad = await plancast("run", "--json", "--nats", nats_url, "--prefix", prefix,
                                 "break the planner", cwd=tmp_path)

    assert ok.returncode == 0, ok.stderr.decode()[-2000:]
    events = events_of(ok)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert isinstance(events[-1], RunFinished) and events[-1].answer == "hello, world"
    assert json.loads(ok.stdout.splitlines()[-1])["type"] == "event.run.finished"

    assert bad.returncode == 1, bad.stderr.decode()[-2000:]
    failed = events_of(bad)[-1]
    assert isinstance(failed, RunFailed) and failed.stage == "plan"


@pytest.mark.anyio
async def test_run_without_nats_starts_its_own_server_and_team(tmp_path: Path) -> None:
    """With no --nats, ``plancast run`` starts an embedded nats-server and the --team file.

    The team's ``files_root`` enables ``read_file`` for the run, as it does for workers.
    """
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "greeting.txt").write_text("hello")
    plan = [plan_line(1, tool="read_file", args={"path": "greeting.txt"}), GOOD[1]]
    rules = [Rule(role="planner", lines=plan), finish("read it")]
    async with open_scripted_model_server(Scenario(rules=rules)) as model:
        team_file = tmp_path / "team.toml"
        team_file.write_text(f"""
files_root = "{tmp_path / 'files'}"

[models.scripted]
model = "scripted-model"
base_url = "{model.base_url}"

[roles.planner]
kind = "planner"
model = "scripted"

[roles.worker]
tools = ["echo", "read_file"]
tool_steps_only = true

[roles.synthesizer]
kind = "synthesizer"
model = "scripted"
""")
        result = await plancast("run", "--json", "--team", str(team_file), "greet everyone",
                                cwd=tmp_path, env=clean_env(PLANCAST_DATA_DIR=str(tmp_path)))
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    events = events_of(result)
    assert isinstance(events[-1], RunFinished) and events[-1].answer == "read it"
    assert [e.output for e in events if isinstance(e, StepFinished)] == ["hello", "hello, world"]
    assert (tmp_path / "nats").is_dir(), "the embedded server keeps its data under the data dir"


@pytest.mark.anyio
async def test_run_a_math_syntax_error_goes_to_the_replan_without_a_retry(
    tmp_path: Path,
) -> None:
    """``plancast run`` as a child: the step that wrote ``3^2`` fails once (not retried as
    is, whatever ``step_attempts``), and the replan's request names the fix."""
    rules = [
        Rule(role="planner", contains="use `**` for powers",
             lines=[plan_line(2, tool="math", args={"expression": "3**2"})]),
        Rule(role="planner", lines=[plan_line(1, tool="math", args={"expression": "3^2"})]),
        finish("9"),
    ]
    async with open_scripted_model_server(Scenario(rules=rules)) as model:
        team_file = tmp_path / "team.toml"
        team_file.write_text("step_attempts = 3\n" + SCRIPTED_TEAM.format(
            base_url=model.base_url).replace('tools = ["echo"]', 'tools = ["math"]'))
        result = await plancast("run", "--json", "--team", str(team_file), "square three",
                                cwd=tmp_path, env=clean_env(PLANCAST_DATA_DIR=str(tmp_path)))
    assert result.returncode == 0, stderr_tail(result)
    events = events_of(result)
    assert isinstance(events[-1], RunFinished) and events[-1].answer == "9"
    [failed] = [e for e in events if isinstance(e, StepFailed)]
    assert (failed.step_id, failed.attempt, failed.will_retry) == (1, 1, False)
    assert "`^` is not an operator here; use `**` for powers" in failed.error
    [replan] = [e for e in events if isinstance(e, ReplanStarted)]
    assert "use `**` for powers" in replan.reason
    assert [e.output for e in events if isinstance(e, StepFinished)] == ["9"]


@pytest.mark.anyio
async def test_run_with_a_broken_team_file_exits_2(tmp_path: Path) -> None:
    """A team file that breaks a rule is an error that names the fix, with exit code 2."""
    team_file = tmp_path / "team.toml"
    team_file.write_text('[roles.planner]\nkind = "planner"\n')
    result = await plancast("run", "--team", str(team_file), "goal", cwd=tmp_path,
                            env=clean_env(PLANCAST_DATA_DIR=str(tmp_path)))
    assert result.returncode == 2
    assert "has no model" in result.stderr.decode()


@pytest.mark.anyio
async def test_demo_json_finishes(tmp_path: Path) -> None:
    """The offline demo runs its whole team and ends with a finished run."""
    result = await plancast("demo", "--json", "--time-scale", "0.2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    events = events_of(result)
    assert isinstance(events[-1], RunFinished) and "1.235" in events[-1].answer


# -- unreachable NATS ----------------------------------------------------------------------

UNREACHABLE = "nats://127.0.0.1:1"
STARTUP_SLACK = 20.0
"""Seconds a command may take beyond its connect timeout: starting Python and importing
plancast on a busy two-core machine."""


@pytest.mark.anyio
@pytest.mark.parametrize("command", [["run", "a goal"], ["status"], ["worker", "--role", "r"]],
                         ids=["run", "status", "worker"])
async def test_commands_give_up_on_an_unreachable_nats_within_the_connect_timeout(
    command: list[str], tmp_path: Path,
) -> None:
    """No server at --nats: exit 2 within the connect timeout, with exactly one line on
    stderr naming the URL, rather than a warning twice a second forever."""
    (tmp_path / "plancast.toml").write_text('[roles.r]\ntools = ["echo"]\ntool_steps_only = true\n')
    begun = anyio.current_time()
    result = await plancast(*command, "--nats", UNREACHABLE, "--connect-timeout", "2",
                            cwd=tmp_path)
    elapsed = anyio.current_time() - begun
    lines = result.stderr.decode().splitlines()
    assert result.returncode == 2, stderr_tail(result)
    assert len(lines) == 1 and UNREACHABLE in lines[0], lines
    assert lines[0].startswith("error: cannot connect to NATS"), lines
    assert "within 2s" in lines[0], "a connect timeout given waits for a server starting"
    assert elapsed < 2 + STARTUP_SLACK


@pytest.mark.anyio
async def test_the_connect_timeout_comes_from_the_environment_too(tmp_path: Path) -> None:
    env = clean_env(PLANCAST_CONNECT_TIMEOUT="1.5", NATS_URL=UNREACHABLE)
    result = await plancast("status", cwd=tmp_path, env=env)
    assert result.returncode == 2
    assert "within 1.5s" in result.stderr.decode()


@pytest.mark.anyio
async def test_a_worker_on_a_server_without_jetstream_exits_with_one_line(tmp_path: Path) -> None:
    """Provisioning retries until its deadline, then says what to check, in one line."""
    (tmp_path / "plancast.toml").write_text('[roles.r]\ntools = ["echo"]\ntool_steps_only = true\n')
    with NatsServerProcess(tmp_path / "nats", jetstream=False) as server:
        result = await plancast("worker", "--role", "r", "--nats", server.url, cwd=tmp_path,
                                env=clean_env(PLANCAST_PUBLISH_RETRY_FOR="1"))
    lines = result.stderr.decode().splitlines()
    assert result.returncode == 2, stderr_tail(result)
    errors = [line for line in lines if line.startswith("error:")]
    assert errors == lines[-1:] and "JetStream enabled" in errors[0], lines
    assert len(lines) <= 4, "one note that it waits (wrapped by the log handler), one error"


# -- schema and roles ----------------------------------------------------------------------


@pytest.mark.anyio
async def test_schema_is_valid_json_schema_for_every_public_message(tmp_path: Path) -> None:
    result = await plancast("schema", cwd=tmp_path)
    assert result.returncode == 0
    schema = json.loads(result.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert len(schema["oneOf"]) == len(PUBLIC_MESSAGES)
    # A real event, as encoded on the wire, validates against the printed schema.
    event = RunFinished(run_id="r1", seq=3, ts=1.0, answer="42")
    jsonschema.Draft202012Validator(schema).validate(msgspec.to_builtins(event))


@pytest.mark.anyio
async def test_roles_lists_the_built_in_roles(tmp_path: Path) -> None:
    result = await plancast("roles", "--json", cwd=tmp_path)
    assert result.returncode == 0
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    for name in ("planner", "executor", "critic", "synthesizer"):
        assert rows[name]["package"] == "plancast" and rows[name]["ok"], rows[name]


# -- a broken plugin -----------------------------------------------------------------------


def broken_plugin(root: Path) -> Path:
    """A fake installed distribution whose two roles cannot be imported."""
    dist = root / "broken_roles-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-roles\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[plancast.roles]\n"
        "ghost = plancast_no_such_module:Role\n"
        "explodes = broken_roles_boom:Role\n"
    )
    (root / "broken_roles_boom.py").write_text('raise RuntimeError("boom at import")\n')
    return root


@pytest.mark.anyio
async def test_roles_reports_a_plugin_that_fails_to_import(tmp_path: Path) -> None:
    """The broken plugin's roles are listed as failed with the reason; the others load."""
    site = broken_plugin(tmp_path / "site")
    env = clean_env(PYTHONPATH=str(site))
    as_json = await plancast("roles", "--json", cwd=tmp_path, env=env)
    table = await plancast("roles", cwd=tmp_path, env=env)

    assert as_json.returncode == 0 and table.returncode == 0
    rows = {row["name"]: row for row in json.loads(as_json.stdout)}
    assert not rows["ghost"]["ok"] and "ModuleNotFoundError" in rows["ghost"]["error"]
    assert not rows["explodes"]["ok"] and "boom at import" in rows["explodes"]["error"]
    assert rows["ghost"]["package"] == "broken-roles"
    assert all(rows[n]["ok"] for n in ("planner", "executor", "critic", "synthesizer"))
    assert "failed" in table.stdout.decode()


def test_a_role_of_a_broken_plugin_is_skipped_with_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Building an actor of a kind whose plugin failed names the failure and what exists."""
    monkeypatch.syspath_prepend(str(broken_plugin(tmp_path)))
    team = team_from_dict({"roles": {"odd": {"kind": "explodes", "tool_steps_only": True}}})
    ctx = RoleContext(bus=None, role=team.role("odd"), team=team,  # type: ignore[arg-type]
                      tools=builtin_tools(plugins=False))
    with pytest.raises(UnknownRole, match="failed to load: RuntimeError: boom at import") as err:
        build_actor(ctx)
    installed = str(err.value).rpartition("installed: ")[2].split(", ")
    assert {"critic", "executor", "planner", "synthesizer"} <= set(installed)
    assert "explodes" not in installed and "ghost" not in installed


def test_log_lines_never_send_control_characters_to_the_terminal() -> None:
    from runtime.cli import PrintableLogFilter

    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "refused %s", (
        "\x1b]0;pwned\x07 \x1b[31mred\x1b[0m [bold]kept[/bold]",), None)
    assert PrintableLogFilter().filter(record)
    assert record.getMessage() == r"refused \x1b]0;pwned\x07 \x1b[31mred\x1b[0m [bold]kept[/bold]"


@pytest.mark.anyio
async def test_version_and_a_bad_setting_are_one_line_each(tmp_path: Path) -> None:
    version = await plancast("--version", cwd=tmp_path, env=clean_env())
    assert version.returncode == 0 and version.stdout.decode().startswith("plancast 0.")
    bad = await plancast("run", "--prefix", "bad prefix", "goal", cwd=tmp_path,
                         env=clean_env(PLANCAST_DATA_DIR=str(tmp_path)))
    lines = bad.stderr.decode().strip().splitlines()
    assert bad.returncode == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: invalid prefix: prefix part 'bad prefix'")


PREFLIGHT_TEAM = """
[models.m]
model = "gpt-4.1-mini"
[roles.planner]
kind = "planner"
model = "m"
[roles.coder]
model = "m"
tools = ["pyhton", "read_file"]
[roles.odd]
kind = "nonexistent"
tool_steps_only = true
"""


@pytest.mark.anyio
async def test_every_problem_of_the_team_is_said_at_once_before_anything_starts(
    tmp_path: Path
) -> None:
    (tmp_path / "plancast.toml").write_text(PREFLIGHT_TEAM)
    env = clean_env(PLANCAST_DATA_DIR=str(tmp_path))
    result = await plancast("up", "--nats", "nats://127.0.0.1:1", cwd=tmp_path, env=env)
    said = result.stderr.decode()
    assert result.returncode == 2 and "Traceback" not in said
    assert said.count("no API key") == 2  # planner and coder
    assert "tool 'pyhton'" in said and "read_file needs files_root" in said
    assert "kind 'nonexistent'" in said
    # The key in .env is found, as the README says: only the other problems remain.
    (tmp_path / ".env").write_text("OPENAI_API_KEY=sk-from-dotenv\n")
    result = await plancast("worker", "--role", "planner", "--nats", "nats://127.0.0.1:1",
                            "--connect-timeout", "1", cwd=tmp_path, env=env)
    said = result.stderr.decode()
    assert result.returncode == 2 and "no API key" not in said and "127.0.0.1:1" in said


@pytest.mark.anyio
async def test_run_without_nats_joins_the_deployment_up_runs_here(tmp_path: Path) -> None:
    """``plancast up`` then ``plancast run`` (neither with --nats): the goal runs on the
    ``up`` deployment's workers, not on a second server over the same store."""
    rules = [Rule(role="planner", lines=[echo(1, "from up")]), finish("joined")]
    async with open_scripted_model_server(Scenario(rules=rules)) as model:
        (tmp_path / "plancast.toml").write_text(SCRIPTED_TEAM.format(base_url=model.base_url))
        env = clean_env(PLANCAST_DATA_DIR=str(tmp_path / "data"))
        up = await anyio.open_process([PLANCAST, "up"], cwd=tmp_path, env=env)
        try:
            url_file = tmp_path / "data" / "nats" / "deployment.url"
            with anyio.fail_after(60):
                while not url_file.exists():  # noqa: ASYNC110 - another process: no event
                    await anyio.sleep(0.1)
            elsewhere = tmp_path / "elsewhere"  # no team file here: run cannot start one
            elsewhere.mkdir()
            result = await plancast("run", "--json", "hello", cwd=elsewhere, env=env)
        finally:
            up.terminate()
            with anyio.fail_after(30):
                await up.wait()
            assert up.stderr is not None
            up_said = b"".join([chunk async for chunk in up.stderr]).decode()
    assert "HTTP Request" not in up_said, "model calls are not logged at INFO"
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert "using the local deployment at nats://" in result.stderr.decode()
    assert not url_file.exists(), "up removes its URL when it stops"
    events = events_of(result)
    assert isinstance(events[-1], RunFinished) and events[-1].answer == "joined"


@pytest.mark.anyio
async def test_a_reader_that_stops_early_ends_the_command_quietly(tmp_path: Path) -> None:
    """``plancast demo --json | head -1``: exit 0, nothing on stderr."""
    process = await anyio.open_process([PLANCAST, "demo", "--json"], cwd=tmp_path,
                                       env=clean_env())
    assert process.stdout is not None and process.stderr is not None
    with anyio.fail_after(60):
        first = await process.stdout.receive()
        await process.stdout.aclose()  # as head does after its line
        errors = b"".join([chunk async for chunk in process.stderr])
        await process.wait()
    assert first.startswith(b'{"type":"event.run.started"')
    assert process.returncode == 0 and errors == b"", errors.decode()


SLOW = [Rule(role="planner", lines=[plan_line(1, tool="sleep", args={"seconds": 60})]),
        finish("never")]


@pytest.mark.anyio
async def test_ctrl_c_during_run_cancels_the_run(nats_url: str, prefix: str,
                                                 tmp_path: Path) -> None:
    async with open_scripted_model_server(Scenario(rules=SLOW)) as model:
        settings = Settings(nats_url=nats_url, prefix=prefix, drain_timeout=0.5)
        async with open_deployment(settings, make_team(model.base_url),
                                   builtin_tools(plugins=False)):
            proc = await anyio.open_process(
                [PLANCAST, "run", "--json", "--nats", nats_url, "--prefix", prefix, "wait"],
                cwd=tmp_path, env=clean_env())
            assert proc.stdout is not None
            lines: list[bytes] = []
            with anyio.fail_after(60):
                async for chunk in proc.stdout:
                    lines += chunk.splitlines()
                    if b'"event.step.started"' in chunk:
                        proc.send_signal(signal.SIGINT)
                await proc.wait()
    assert proc.returncode == 130
    last = msgspec.json.decode(lines[-1])
    assert last["type"] == "event.run.failed" and last["cause"] == "cancelled", last
    assert "cancelled by plancast run on" in last["reason"] and "Ctrl-C" in last["reason"]


@pytest.mark.anyio
async def test_plancast_cancel_ends_a_run_and_says_how(nats_url: str, prefix: str,
                                                       tmp_path: Path) -> None:
    async with open_scripted_model_server(Scenario(rules=SLOW)) as model:
        settings = Settings(nats_url=nats_url, prefix=prefix, drain_timeout=0.5)
        async with open_deployment(settings, make_team(model.base_url),
                                   builtin_tools(plugins=False)) as bus:
            accepted = await submit(bus, RunRequest(goal="wait"))
            result = await plancast("cancel", accepted.run_id, "--reason", "changed my mind",
                                    "--nats", nats_url, "--prefix", prefix, cwd=tmp_path)
            events = [e async for e in follow(bus, accepted.run_id)]
    assert result.returncode == 0, stderr_tail(result)
    said = result.stdout.decode()
    assert said.startswith(f"run {accepted.run_id} failed: cancelled by plancast cancel on ")
    assert said.rstrip().endswith(": changed my mind")
    assert isinstance(events[-1], RunFailed) and events[-1].cause == "cancelled"


NO_MODEL_TEAM = '[roles.planner]\nkind = "planner"\n[roles.w]\ntools = ["echo"]\n'
UNKNOWN_KIND_TEAM = '[roles.r]\nkind = "nope"\ntool_steps_only = true\n'


@pytest.mark.anyio
@pytest.mark.parametrize(("argv", "team", "said"), [
    (["up"], None, "team file plancast.toml does not exist"),
    (["worker", "--role", "w"], None, "team file plancast.toml does not exist"),
    (["up"], "[roles.planner\nkind = 1", "plancast.toml"),  # a TOML syntax error
    (["worker", "--role", "planner"], NO_MODEL_TEAM, "[roles.planner]"),  # not eaten as markup
    (["run", "goal"], UNKNOWN_KIND_TEAM, "kind 'nope'"),
    (["up", "--prefix", "bad prefix"], NO_MODEL_TEAM, "invalid prefix"),
    (["demo", "--time-scale", "-1"], None, "--time-scale"),  # a usage error, one line too
    (["serve", "--nats", "nats://127.0.0.1:1", "--connect-timeout", "1"], None,
     "cannot connect to NATS"),
])
async def test_a_newcomers_mistake_is_one_line_and_exit_2(
    tmp_path: Path, argv: list[str], team: str | None, said: str
) -> None:
    if team is not None:
        (tmp_path / "plancast.toml").write_text(team)
    result = await plancast(*argv, cwd=tmp_path, env=clean_env(
        PLANCAST_DATA_DIR=str(tmp_path / "data"), OPENAI_API_KEY="sk-test"))
    lines = result.stderr.decode().strip().splitlines()
    assert result.returncode == 2 and 1 <= len(lines) <= 2, lines
    assert "Traceback" not in result.stderr.decode() and said in lines[0], lines
    assert not (tmp_path / "data" / "nats" / "deployment.url").exists()  # nothing started


@pytest.mark.anyio
async def test_a_worker_without_nats_or_a_local_deployment_says_it_serves_alone(
    tmp_path: Path
) -> None:
    (tmp_path / "plancast.toml").write_text('[roles.w]\ntools = ["echo"]\ntool_steps_only = true\n')
    proc = await anyio.open_process(
        [PLANCAST, "worker", "--role", "w"], cwd=tmp_path,
        env=clean_env(PLANCAST_DATA_DIR=str(tmp_path / "data")))
    try:
        assert proc.stderr is not None
        with anyio.fail_after(30):
            first = (await proc.stderr.receive()).decode()
    finally:
        proc.terminate()
        with anyio.fail_after(30):
            await proc.wait()
    assert first.startswith("no --nats and no local deployment (plancast up): starting a "
                            "private server"), first


@pytest.mark.anyio
async def test_watch_replays_a_run_late_and_runs_lists_it(nats_url: str, prefix: str,
                                                          tmp_path: Path) -> None:
    """``watch`` attached while the run goes and after it ended prints the same events."""
    where = ["--nats", nats_url, "--prefix", prefix]
    rules = [Rule(role="planner", lines=[echo(1, "hello"), plan_line(
        2, tool="sleep", args={"seconds": 3}), echo(3, "$1, world", depends_on=[2])]),
        finish("hello, world")]
    async with open_scripted_model_server(Scenario(rules=rules)) as model:
        settings = Settings(nats_url=nats_url, prefix=prefix)
        async with open_deployment(settings, make_team(model.base_url),
                                   builtin_tools(plugins=False)) as bus:
            accepted = await submit(bus, RunRequest(goal="greet the world"))
            live = await plancast("watch", accepted.run_id, "--json", *where, cwd=tmp_path)
            events = [e async for e in follow(bus, accepted.run_id)]
    assert live.returncode == 0 and events_of(live) == events, stderr_tail(live)
    watched = await plancast("watch", accepted.run_id, "--json", *where, cwd=tmp_path)
    shown = await plancast("watch", accepted.run_id, *where, cwd=tmp_path)
    listed = await plancast("runs", "--json", *where, cwd=tmp_path)
    table = await plancast("runs", *where, cwd=tmp_path)
    unknown = await plancast("watch", "run-000000000000", *where, cwd=tmp_path)
    assert watched.returncode == 0 and events_of(watched) == events, stderr_tail(watched)
    assert shown.returncode == 0 and "answer: hello, world" in shown.stdout.decode()
    [row] = json.loads(listed.stdout)
    assert row["run_id"] == accepted.run_id and row["status"] == "finished"
    assert row["steps_done"] == row["steps_total"] == 3 and row["tokens"] > 0
    assert accepted.run_id in table.stdout.decode() and "finished" in table.stdout.decode()
    said = unknown.stderr.decode().strip().splitlines()
    assert unknown.returncode == 2 and len(said) == 1 and "plancast runs" in said[0], said
