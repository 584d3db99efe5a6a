"""How every command starts, once: the flags commands share, settings from those flags,
the environment and ``.env``, the deployment to talk to (``--nats`` or the local one),
and the one-line errors and exit codes of the async part."""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn, get_type_hints

import anyio
import typer
from dotenv import load_dotenv
from pydantic import ValidationError

from ..bus import Bus, open_bus, running, secret_of
from ..client import read_run
from ..config import Settings, TeamConfig, load_team
from ..errors import PlancastError
from ..tools import ToolRegistry, builtin_tools
from ..worker import backend_options, tune_gc
from .served import served_by_local
from .terminal import err_console, print_error, reader_gone, setup_logging

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

NATS_HELP = "NATS server URL(s); default: embedded server."


@dataclass(frozen=True)
class Connection:
    """Where a command finds NATS: ``--nats``, ``--creds``, ``--prefix`` and
    ``--connect-timeout`` (a command declares one ``Connection`` parameter instead of the
    four; :func:`connection_flags` gives typer the flags)."""

    nats: str | None = None
    creds: Path | None = None
    prefix: str | None = None
    connect_timeout: float | None = None


def connection_flags(*, nats_help: str = NATS_HELP,
                     ) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Typer sees the four connection flags where the command takes its ``Connection``
    (so every ``--help`` lists them in the same place); the command gets them as one value."""
    flags: dict[str, Any] = {
        "nats": Annotated[str | None, typer.Option("--nats", envvar="NATS_URL", help=nats_help)],
        "creds": CredsOpt,
        "prefix": PrefixOpt,
        "connect_timeout": ConnectTimeoutOpt,
    }

    def with_flags(command: Callable[..., None]) -> Callable[..., None]:
        hints = get_type_hints(command, include_extras=True)
        (name,) = (param for param, hint in hints.items() if hint is Connection)
        shown: list[inspect.Parameter] = []
        for param in inspect.signature(command).parameters.values():
            if param.name == name:
                shown += [inspect.Parameter(flag, inspect.Parameter.KEYWORD_ONLY, default=None,
                                            annotation=hint) for flag, hint in flags.items()]
            else:
                shown.append(param.replace(annotation=hints[param.name]))

        @functools.wraps(command)
        def parsed(**given: Any) -> None:
            connection = Connection(**{flag: given.pop(flag) for flag in flags})
            command(**given, **{name: connection})

        parsed.__signature__ = inspect.Signature(shown)  # type: ignore[attr-defined]
        parsed.__annotations__ = {param.name: param.annotation for param in shown}
        return parsed

    return with_flags


def build_settings(connection: Connection) -> Settings:
    """Settings from the environment and ``.env``, with command-line flags on top. The
    ``.env`` file also fills the environment (without overriding it), so the model keys it
    holds (``OPENAI_API_KEY`` ...) are found as the README says."""
    load_dotenv(".env", override=False)
    overrides: dict[str, Any] = {}
    if connection.nats:
        overrides["nats_url"] = connection.nats
    if connection.creds:
        overrides["creds"] = connection.creds
    if connection.prefix:
        overrides["prefix"] = connection.prefix
    if connection.connect_timeout is not None:
        overrides["connect_timeout"] = connection.connect_timeout
    try:
        return Settings(**overrides)
    except ValidationError as exc:  # a flag, the environment or .env: one line each
        for error in exc.errors():
            where = ".".join(str(part) for part in error["loc"]) or "settings"
            print_error(f"invalid {where}: {error['msg'].removeprefix('Value error, ')}")
        raise typer.Exit(2) from None


def local_deployment(settings: Settings) -> tuple[Settings, bool]:
    """Without ``--nats`` (or with the URL it printed): the deployment ``plancast up``
    runs on this machine, if any, with its secret as the token (the user passes nothing);
    and whether that is the one the settings now name."""
    store = settings.data_dir / "nats"
    try:
        if (url := running(store)) is None or settings.nats_url not in (None, url):
            return settings, False
        secret = secret_of(store)
        team = served_by_local(settings)
    except PlancastError as exc:  # a URL or secret others could read or write
        if settings.nats_url:
            return settings, False  # not ours to use: the server named is asked as it is
        print_error(str(exc))
        raise typer.Exit(2) from None
    if not settings.nats_url:
        serves = f"team {team.file}, " if team else ""
        err_console.print(f"using the local deployment at {url} ({serves}started by plancast "
                          "up; --nats to choose another)", markup=False, highlight=False,
                          soft_wrap=True)
    return settings.model_copy(update={"nats_url": url, "token": secret}), True


@dataclass(frozen=True)
class Started:
    """A command past its preamble: its settings, and how its async part runs and ends."""

    settings: Settings
    verbose: bool
    local: bool = False
    """It joins the local deployment (``plancast up`` on this machine): a team it is given
    must be the one that deployment serves (``served.check_same_team``)."""
    service: bool = False
    """Runs alongside its server (``serve``): waits the whole connect timeout for it."""

    @property
    def refusal_is_final(self) -> bool:
        """A connection refused outright ends the command after the first quick attempts
        (``runtime.bus.connect``): a command run once, with no connect timeout chosen (a
        chosen one says to wait for a server that is still starting)."""
        return not self.service and "connect_timeout" not in self.settings.model_fields_set

    def run(self, main: Callable[[], Awaitable[int]]) -> NoReturn:
        """Run ``main`` and exit with its code (see :func:`run_async`)."""
        run_async(main, verbose=self.verbose)

    def on_bus(self, work: Callable[[Bus], Awaitable[int]], *,
               ensure_streams: bool = False) -> NoReturn:
        """Connect, run ``work`` on the bus, exit with its code. A reader creates nothing;
        a command that publishes asks for ``ensure_streams``."""
        settings = self.settings

        async def main() -> int:
            async with open_bus(settings, ensure_streams=ensure_streams,
                                refusal_is_final=self.refusal_is_final) as bus:
                return await work(bus)

        self.run(main)


Needs = Literal["deployment", "server", "any"]
"""What a command talks to: a running ``deployment`` (``--nats`` or the local one), a
``server`` named by ``--nats`` (the admin's commands), or ``any`` (else it starts its own)."""


def begin(connection: Connection, verbose: bool, command: str, *,
          needs: Needs = "deployment", quiet: bool = True, service: bool = False) -> Started:
    """The preamble of a command that talks to NATS: log lines, settings, the deployment.
    What it cannot find is one line naming the command, and exit 2. ``service``: see
    ``Started``."""
    setup_logging(verbose, quiet=quiet)
    settings, local = build_settings(connection), False
    if needs != "server":
        settings, local = local_deployment(settings)
    if not settings.nats_url and needs == "deployment":
        print_error(f"plancast {command} needs a running deployment: pass --nats URL or set "
                    "NATS_URL, or start one here with `plancast up`")
        raise typer.Exit(2)
    if not settings.nats_url and needs == "server":
        print_error(f"plancast {command} needs a server: pass --nats URL or set NATS_URL")
        raise typer.Exit(2)
    return Started(settings, verbose, local, service)


def _expected(exc: BaseException) -> BaseException | None:
    """The error to report in one line: plancast's own or a connection error, also when a
    task group wrapped it; None for anything else (a bug: that gets a traceback)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc if isinstance(exc, PlancastError | ConnectionError) else None


def run_async(main: Callable[[], Awaitable[int]], *, verbose: bool = False) -> NoReturn:
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
            reader_gone()
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


def team_file(path: Path | None) -> TeamConfig:
    """The team ``--team`` names, else ``./plancast.toml``."""
    return load_team(path or Path("plancast.toml"))


def team_tools(team: TeamConfig) -> ToolRegistry:
    """The built-in tools (and plugins) as the team file configures them."""
    return builtin_tools(files_root=team.files_root, sandbox=team.sandbox,
                         http_allow=team.http_allow)


async def known_run(bus: Bus, run_id: str) -> bool:
    """Whether the deployment has this run; if not, says so in one line."""
    if await read_run(bus, run_id) is None:
        print_error(f"no run {run_id} under prefix {bus.prefix!r} on {bus.server_url}: list "
                    "them with `plancast runs`")
        return False
    return True
