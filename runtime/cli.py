"""The ``plancast`` command line. Conventions follow the ``nats`` CLI (``--nats``/``NATS_URL``,
``--creds``) and the openai client (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``)."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import tempfile
from collections.abc import Awaitable, Callable
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Annotated

import anyio
import msgspec
import typer
from rich.live import Live
from rich.table import Table

from protocols import RunFailed, RunFinished, RunRequest, encode, json_schema

from . import preflight
from .bus import Bus
from .cli_setup import (
    build_settings,
    console,
    err_console,
    local_deployment,
    print_error,
    setup_logging,
)
from .client import cancel, follow, submit
from .connection import open_bus
from .demo import DEMO_GOAL, demo_scenario_path, demo_team
from .errors import PlancastError
from .process import open_deployment, serve_actors
from .registry import discover_roles
from .role import build_team_actors
from .settings import Settings
from .status import HEARTBEAT_WINDOWS, collect_status, render_status
from .team import TeamConfig, load_team
from .testing import load_scenario, open_scripted_model_server
from .tools import ToolRegistry, builtin_tools
from .tools.sandbox import find_bwrap
from .view import RunView

app = typer.Typer(
    help="plancast: planner-executor LLM agent teams over NATS.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _version(asked: bool) -> None:
    if asked:
        console.print(f"plancast {package_version('plancast')}", markup=False)
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """plancast: planner-executor LLM agent teams over NATS."""

NatsOpt = Annotated[
    str | None,
    typer.Option("--nats", envvar="NATS_URL", help="NATS server URL(s); default: embedded server."),
]
CredsOpt = Annotated[
    Path | None, typer.Option("--creds", envvar="NATS_CREDS", help="NATS credentials file.")
]
PrefixOpt = Annotated[
    str | None, typer.Option("--prefix", envvar="PLANCAST_PREFIX", help="Subject prefix.")
]
ConnectTimeoutOpt = Annotated[
    float | None,
    typer.Option("--connect-timeout", envvar="PLANCAST_CONNECT_TIMEOUT", min=0.1,
                 help="Seconds to wait for the first connection to NATS; default 5."),
]
VerboseOpt = Annotated[bool, typer.Option(
    "--verbose", "-v", "--debug", envvar="PLANCAST_DEBUG",
    help="Log debug details; an error shows its traceback.")]
TeamOpt = Annotated[
    Path | None,
    typer.Option("--team", envvar="PLANCAST_ROLES_FILE",
                 help="Team file (TOML): roles, prompts, models, tools. Default: ./plancast.toml"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print events as NDJSON.")]


@app.command()
def schema() -> None:
    """Print the JSON Schema of every public wire message."""
    json.dump(json_schema(), sys.stdout, indent=2)
    sys.stdout.write("\n")


@app.command()
def roles(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List every role found in the ``plancast.roles`` entry-point group."""
    found = discover_roles()
    if as_json:
        rows = [
            {"name": r.name, "target": r.target, "package": r.package, "version": r.version,
             "ok": r.ok, "error": r.error}
            for r in found.values()
        ]
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    table = Table(title="plancast roles")
    for column in ("role", "from", "version", "target", "status"):
        table.add_column(column)
    for r in sorted(found.values(), key=lambda r: r.name):
        status = "[green]ok[/]" if r.ok else f"[red]failed: {r.error}[/]"
        table.add_row(r.name, r.package, r.version, r.target, status)
    console.print(table)


def team_tools(team: TeamConfig) -> ToolRegistry:
    """The built-in tools (and plugins) as the team file configures them."""
    return builtin_tools(files_root=team.files_root, sandbox=team.sandbox,
                         http_allow=team.http_allow)


def _team(path: Path | None) -> TeamConfig:
    path = path or Path("plancast.toml")
    return load_team(path)


def _expected(exc: BaseException) -> BaseException | None:
    """The error to report in one line: plancast's own or a connection error, also when a
    task group wrapped it; None for anything else (a bug: that gets a traceback)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc if isinstance(exc, PlancastError | ConnectionError) else None


def _run_async(main: Callable[[], Awaitable[int]], *, verbose: bool = False) -> None:
    """Run ``main``; plancast's own errors print what to do in one line and exit 2.

    Anything else is a bug: one line naming it, and the traceback with ``--verbose``.
    """
    try:
        code = anyio.run(main)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except Exception as exc:
        if isinstance(_expected(exc), BrokenPipeError):  # `| head`: the reader has gone
            _reader_gone()
        if (expected := _expected(exc)) is not None:
            if verbose:
                logging.getLogger("plancast").debug("the error, in full:", exc_info=exc)
            print_error(str(expected))
            raise typer.Exit(2) from None
        if verbose:
            raise
        print_error(f"unexpected {type(exc).__name__}: {exc} (run again with --verbose for "
                    "the traceback, and please report it)")
        raise typer.Exit(1) from None
    raise typer.Exit(code)


async def _run_and_show(bus: Bus, request: RunRequest, as_json: bool) -> int:
    """Submit, follow the events to the end, print the outcome; 0 if the run finished.

    The first Ctrl-C cancels the run and waits (up to CANCEL_WAIT) for it to end; a
    second stops waiting."""
    accepted = await submit(bus, request)
    view = RunView(accepted.run_id)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_cancel_on_interrupt, bus, accepted.run_id, tg.cancel_scope)
        if as_json:
            async for event in follow(bus, accepted.run_id):
                view.apply(event)
                sys.stdout.write(encode(event).decode() + "\n")
                sys.stdout.flush()
        else:
            with Live(view.render(console.width), console=console, refresh_per_second=8) as live:
                async for event in follow(bus, accepted.run_id):
                    view.apply(event)
                    live.update(view.render(console.width))
        tg.cancel_scope.cancel()
    if view.outcome is None:
        print_error(f"stopped waiting: run {accepted.run_id} may still be going (see `plancast "
                    "status`)")
        return 130
    if not as_json:
        if isinstance(view.outcome, RunFinished):
            console.print(f"\n[bold green]answer:[/] {view.outcome.answer}")
        elif view.outcome is not None:
            console.print(f"\n[bold red]run failed[/] ({view.outcome.stage}): "
                          f"{view.outcome.reason}")
    if isinstance(view.outcome, RunFailed) and view.outcome.cause == "cancelled":
        return 130
    return 0 if isinstance(view.outcome, RunFinished) else 1


CANCEL_WAIT = 15.0
"""Seconds ``plancast run`` waits for a run it cancelled on Ctrl-C to end."""


async def _cancel_on_interrupt(bus: Bus, run_id: str, following: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGINT) as interrupts:
        async for _ in interrupts:
            print_error(f"cancelling run {run_id} (Ctrl-C again to stop waiting for it)")
            await cancel(bus, run_id, "Ctrl-C", source=f"plancast run on {socket.gethostname()}")
            following.deadline = anyio.current_time() + CANCEL_WAIT
            break
        async for _ in interrupts:
            following.cancel()
            return


@app.command()
def demo(
    goal: Annotated[str, typer.Argument(help="The goal (the scenario answers the default).")]
    = DEMO_GOAL,
    as_json: JsonOpt = False,
    time_scale: Annotated[float, typer.Option(min=0.0,
                                              help="Multiply the scripted latencies.")] = 1.0,
    verbose: VerboseOpt = False,
) -> None:
    """Run a whole team offline: embedded NATS, a SCRIPTED model, live progress."""
    setup_logging(verbose, quiet=True)

    async def main() -> int:
        scenario = load_scenario(Path(str(demo_scenario_path())))
        with tempfile.TemporaryDirectory(prefix="plancast-demo-") as tmp:
            async with open_scripted_model_server(scenario, time_scale=time_scale) as model:
                if not as_json:
                    console.print(f"[bold]plancast demo[/] - every model answer comes from a "
                                  f"[bold yellow]scripted model[/] at {model.base_url}, "
                                  "not a real LLM.")
                settings = Settings(nats_url=None, data_dir=Path(tmp))
                # The demo's code comes from its script, not from a model: without
                # bubblewrap it runs unsandboxed rather than not at all, and says so.
                sandbox = "bwrap" if find_bwrap() else "none"
                if sandbox == "none" and not as_json:
                    console.print("(bubblewrap is not installed: the demo's scripted python "
                                  "step runs unsandboxed; a real team refuses to)",
                                  markup=False)
                async with open_deployment(settings, demo_team(model.base_url),
                                           builtin_tools(sandbox=sandbox)) as bus:
                    return await _run_and_show(bus, RunRequest(goal=goal), as_json)

    _run_async(main, verbose=verbose)


@app.command()
def run(
    goal: Annotated[str, typer.Argument(help="What the team should achieve.")],
    team: TeamOpt = None,
    nats: NatsOpt = None,
    creds: CredsOpt = None,
    prefix: PrefixOpt = None,
    connect_timeout: ConnectTimeoutOpt = None,
    as_json: JsonOpt = False,
    max_replans: Annotated[int, typer.Option(help="Replan rounds allowed.")] = 1,
    max_steps: Annotated[int, typer.Option(help="Most steps in one plan.")] = 64,
    verbose: VerboseOpt = False,
) -> None:
    """Run a goal. With --nats, hand it to the workers there; else run the team here."""
    setup_logging(verbose, quiet=True)
    settings = local_deployment(build_settings(nats, creds, prefix, connect_timeout))
    request = RunRequest(goal=goal, max_replans=max_replans, max_steps=max_steps)

    async def main() -> int:
        if settings.nats_url:
            async with open_bus(settings) as bus:
                return await _run_and_show(bus, request, as_json)
        team_config = _team(team)
        tools = team_tools(team_config)
        preflight.check(team_config, tools)
        async with open_deployment(settings, team_config, tools) as bus:
            return await _run_and_show(bus, request, as_json)

    _run_async(main, verbose=verbose)


@app.command("cancel")
def cancel_command(
    run_id: Annotated[str, typer.Argument(help="The run to stop.")],
    reason: Annotated[str, typer.Option(help="Why (shown in the run's last event).")] = "",
    nats: NatsOpt = None,
    creds: CredsOpt = None,
    prefix: PrefixOpt = None,
    connect_timeout: ConnectTimeoutOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Ask the planner to stop a run; waits until it has ended (a run.failed, "cancelled")."""
    setup_logging(verbose, quiet=True)
    settings = local_deployment(build_settings(nats, creds, prefix, connect_timeout))
    if not settings.nats_url:
        print_error("no deployment to cancel a run in: start one with `plancast up`, or pass "
                    "--nats")
        raise typer.Exit(2)

    async def main() -> int:
        async with open_bus(settings) as bus:
            await cancel(bus, run_id, reason, source=f"plancast cancel on {socket.gethostname()}")
            with anyio.move_on_after(CANCEL_WAIT):
                async for event in follow(bus, run_id):
                    if isinstance(event, RunFailed | RunFinished):
                        ended = "finished" if isinstance(event, RunFinished) else "failed"
                        console.print(f"run {run_id} {ended}: "
                                      f"{getattr(event, 'reason', '') or 'with an answer'}",
                                      markup=False)
                        return 0
            print_error(f"asked to cancel run {run_id}; it has not ended within "
                        f"{CANCEL_WAIT:g}s (see `plancast status`)")
            return 1

    _run_async(main, verbose=verbose)


@app.command()
def worker(
    role: Annotated[list[str], typer.Option("--role", "-r", help="Role to serve (repeatable).")],
    team: TeamOpt = None,
    nats: NatsOpt = None,
    creds: CredsOpt = None,
    prefix: PrefixOpt = None,
    connect_timeout: ConnectTimeoutOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Serve actors of the named roles until SIGTERM/SIGINT (then drain)."""
    setup_logging(verbose)
    _serve(build_settings(nats, creds, prefix, connect_timeout), team, role, verbose)


@app.command()
def up(
    team: TeamOpt = None,
    nats: NatsOpt = None,
    creds: CredsOpt = None,
    prefix: PrefixOpt = None,
    connect_timeout: ConnectTimeoutOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Serve every role of the team in this process until SIGTERM/SIGINT."""
    setup_logging(verbose)
    _serve(build_settings(nats, creds, prefix, connect_timeout), team, None, verbose)


@app.command("status")
def status_command(
    nats: Annotated[
        str | None,
        typer.Option("--nats", envvar="NATS_URL",
                     help="NATS server URL(s) of the running deployment (required)."),
    ] = None,
    creds: CredsOpt = None,
    prefix: PrefixOpt = None,
    connect_timeout: ConnectTimeoutOpt = None,
    wait: Annotated[
        float | None,
        typer.Option("--wait", min=0.0,
                     help="Seconds to listen for heartbeats; default: 1.5 heartbeat intervals."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help='Print one JSON object {"actors": [...], "runs": [...]}.')
    ] = False,
    verbose: VerboseOpt = False,
) -> None:
    """Show the live actors (from their heartbeats) and the active runs of a deployment."""
    setup_logging(verbose, quiet=True)
    settings = local_deployment(build_settings(nats, creds, prefix, connect_timeout))
    if not settings.nats_url:
        print_error("plancast status needs a running deployment: pass --nats URL or set "
                    "NATS_URL, or start one here with `plancast up`")
        raise typer.Exit(2)
    window = HEARTBEAT_WINDOWS * settings.heartbeat_interval if wait is None else wait

    async def main() -> int:
        async with open_bus(settings, ensure_streams=False) as bus:
            found = await collect_status(bus, wait=window)
        if as_json:
            sys.stdout.write(msgspec.json.encode(found).decode() + "\n")
        else:
            render_status(found, console, wait=window)
        return 0

    _run_async(main, verbose=verbose)


def _serve(settings: Settings, team: Path | None, roles: list[str] | None,
           verbose: bool) -> None:
    settings = local_deployment(settings)

    async def main() -> int:
        team_config = _team(team)
        tools = team_tools(team_config)
        preflight.check(team_config, tools, roles)
        if not settings.nats_url and roles:  # a worker alone on a server nobody can reach
            err_console.print("no --nats and no local deployment (plancast up): starting a "
                              "private server that only this process uses", markup=False,
                              highlight=False, soft_wrap=True)
        async with open_bus(settings) as bus:
            actors = build_team_actors(bus, team_config, tools, roles)
            names = ", ".join(f"{a.name}/{a.instance}" for a in actors)
            logging.getLogger("plancast").info("serving %s on %s (prefix %s)", names,
                                               bus.server_url, bus.prefix)
            await serve_actors(actors)
        return 0

    _run_async(main, verbose=verbose)


def _reader_gone() -> None:
    """Whoever read our output stopped (``plancast run --json … | head -1``): end quietly."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
    raise SystemExit(0)


def main() -> None:
    try:
        app()
    except BrokenPipeError:
        _reader_gone()


from . import cli_auth  # noqa: E402, F401  (registers ``auth`` and ``provision``)
