"""The ``plancast`` command line. Conventions follow the ``nats`` CLI (``--nats``/``NATS_URL``,
``--creds``) and the openai client (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``)."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Annotated

import anyio
import msgspec
import typer
from rich.table import Table

from protocols import json_schema

from .actor import build_team_actors, discover_roles
from .bus import open_bus
from .cli_setup import (
    build_settings,
    console,
    err_console,
    local_deployment,
    print_error,
    setup_logging,
)
from .client import HEARTBEAT_WINDOWS, collect_status, render_status
from .config import Settings, TeamConfig, load_team
from .errors import PlancastError
from .tools import ToolRegistry, builtin_tools
from .worker import backend_options, preflight, serve_actors, tune_gc

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
    tune_gc()
    try:
        code = anyio.run(main, backend_options=backend_options())
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
        async with open_bus(settings) as bus, anyio.create_task_group() as tg:
            actors = build_team_actors(bus, team_config, tools, roles)
            await tg.start(serve_actors, actors)  # said once they serve (and SIGTERM drains)
            names = ", ".join(f"{a.name}/{a.instance}" for a in actors)
            logging.getLogger("plancast").info("serving %s on %s (prefix %s)", names,
                                               bus.server_url, bus.prefix)
        return 0

    _run_async(main, verbose=verbose)


def _reader_gone() -> None:
    """Whoever read our output stopped (``plancast run --json … | head -1``): end quietly."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
    raise SystemExit(0)


_USAGE_ERROR: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
"""Click's usage error (typer vendors click in newer versions, so it is found, not imported)."""


def main() -> None:
    try:
        code = app(standalone_mode=False)
    except _USAGE_ERROR as exc:  # a mistyped command, option or value: one line, exit 2
        ctx = getattr(exc, "ctx", None)
        where = ctx.command_path if ctx is not None else "plancast"
        print_error(f"{exc.format_message()} (see `{where} --help`)")  # type: ignore[attr-defined]
        raise SystemExit(2) from None
    except typer.Abort:  # Ctrl-C at a prompt
        raise SystemExit(130) from None
    except BrokenPipeError:
        _reader_gone()
    raise SystemExit(code if isinstance(code, int) else 0)


from . import (  # noqa: E402, F401  (register their commands)
    cli_auth,
    cli_local,
    cli_plans,
    cli_runs,
    cli_serve,
)
