"""``plancast auth init`` and ``plancast provision``: per-role users, and the admin's job of
creating what they may only use."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer

from ..bus import (
    ADMIN,
    CONF_FILE,
    DEFAULT_URL,
    creds_file,
    grants,
    open_bus,
    provision_consumers,
    write_auth,
)
from ..errors import PlancastError
from .options import (
    Connection,
    PrefixOpt,
    TeamOpt,
    VerboseOpt,
    begin,
    build_settings,
    connection_flags,
    team_file,
)
from .terminal import console, print_error


def init(
    directory: Annotated[Path, typer.Argument(help="Where to write the files.")] = Path(
        "plancast-auth"),
    team: TeamOpt = None,
    prefix: PrefixOpt = None,
    nats: Annotated[str | None, typer.Option(
        "--nats", envvar="NATS_URL", help="The server's URL as clients reach it, written "
        f"into each user's file; default {DEFAULT_URL}.")] = None,
    server_config: Annotated[Path | None, typer.Option(
        "--server-config", help="The nats-server config that is to include the users: the "
        "printed include line is relative to its directory (default: this directory).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace existing files (new "
                                        "passwords: restart everything that uses them).")
                     ] = False,
) -> None:
    """Write a nats-server authorization block and a credentials file per user (a NATS
    context: plancast, the nats CLI and other clients read it): admin, each role of the
    team, client and watcher."""
    settings = build_settings(Connection(prefix=prefix))
    if (directory / CONF_FILE).exists() and not force:
        print_error(f"{directory / CONF_FILE} exists: pass --force to replace it and every "
                    "password with it")
        raise typer.Exit(2)
    try:
        team_config = team_file(team)
    except PlancastError as exc:  # a team file mistake: one line
        print_error(str(exc))
        raise typer.Exit(2) from None
    written = write_auth(directory, settings.prefix, team_config, nats or DEFAULT_URL)
    users = grants(settings.prefix, team_config)
    console.print(f"wrote {len(written)} files to {directory} (readable by you only) for "
                  f"users: {', '.join(users)}", soft_wrap=True, markup=False)
    if server_config:
        config_dir, where = server_config.parent, f"to {server_config}"
    else:
        config_dir, where = Path(), ("to a nats-server config in this directory (for one "
                                     "elsewhere, --server-config FILE prints its line)")
    console.print(
        f"next: add  {include_line(directory / CONF_FILE, config_dir)}  {where}, and restart "
        f"nats-server; then `plancast provision --creds {creds_file(directory, ADMIN)} --team "
        f"…`; then start each role with its own `--creds {creds_file(directory, '<role>')}`",
        soft_wrap=True, markup=False)


def include_line(conf: Path, config_dir: Path) -> str:
    """The ``include`` line for a server config in ``config_dir``: nats-server reads an
    include relative to the including file's directory, even one spelt absolute."""
    return f"include {json.dumps(os.path.relpath(conf.absolute(), config_dir.absolute()))}"


@connection_flags()
def provision(
    team: TeamOpt = None,
    *,
    connection: Connection,
    verbose: VerboseOpt = False,
) -> None:
    """Create or update the deployment's streams, buckets and the team's consumers.

    The admin's job where roles run with their own users.
    """
    command = begin(connection, verbose, "provision", needs="server")
    settings = command.settings

    async def main() -> int:
        team_config = team_file(team)
        async with open_bus(settings) as bus:
            made = await provision_consumers(bus.js, team_config, settings)
        console.print(f"provisioned prefix {settings.prefix!r} on {settings.nats_url}: "
                      f"streams, buckets and consumers {', '.join(made)}",
                      soft_wrap=True, markup=False)
        return 0

    command.run(main)
