"""Progress for tools outside NATS: ``plancast serve`` (the HTTP/SSE gateway and dashboard,
``runtime.gateway``, on uvicorn) and ``plancast trace`` (a run as OpenTelemetry spans)."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated

import typer

from ..bus import Bus
from ..client import follow
from .options import Connection, VerboseOpt, begin, connection_flags, known_run
from .terminal import err_console, print_error


@connection_flags()
def serve(
    host: Annotated[str, typer.Option(
        help="Address to listen on: loopback unless you name another (0.0.0.0: every "
             "interface; plain HTTP, so put TLS in front).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on.")] = 8080,
    allow_origin: Annotated[list[str] | None, typer.Option(
        help="An origin (scheme://host[:port]) whose pages may call the gateway besides its "
             "own, e.g. the proxy's in front of it (repeatable).")] = None,
    allow_host: Annotated[list[str] | None, typer.Option(
        help="A host name the gateway answers to besides localhost, IP addresses and "
             "--host, e.g. the machine's name (repeatable).")] = None,
    users: Annotated[Path | None, typer.Option(
        envvar="PLANCAST_GATEWAY_USERS",
        help="A file (mode 0600) with a `name token` line per person: each signs in with "
             "their own token and their decisions are recorded under their name. Default: "
             "one token, for the user running serve.")] = None,
    *,
    connection: Connection,
    verbose: VerboseOpt = False,
) -> None:
    """Serve the HTTP gateway and dashboard: submit runs, follow them (SSE), decide on
    them, cancel them.

    Every request but the dashboard page needs the token it prints at start (or a user's
    own, with --users)."""
    try:
        from ..gateway import (
            TOKEN_FILE,
            Access,
            GatewayAccessError,
            gateway_token,
            gateway_user,
            read_users,
            serve_http,
        )
    except ImportError as exc:
        print_error(f"plancast serve needs the serve extra ({exc.name} is missing): "
                    "pip install 'plancast[serve]'")
        raise typer.Exit(2) from None
    command = begin(connection, verbose, "serve", service=True)
    settings = command.settings
    try:
        if users is None:
            token = gateway_token(settings.data_dir, settings.gateway_token)
            people = {gateway_user(): token}
        else:
            token, people = "", read_users(users)
        access = Access.of(people, bound=host, origins=allow_origin or (),
                           hosts=allow_host or ())
    except (GatewayAccessError, OSError) as exc:
        print_error(f"plancast serve: {exc}")
        raise typer.Exit(2) from None

    async def serve_gateway(bus: Bus) -> int:
        # Connected before serving: an unreachable NATS is one line, not a failed start-up.
        base = f"http://{_url_host(host)}:{port}"
        kept = ("from PLANCAST_GATEWAY_TOKEN" if settings.gateway_token
                else f"kept in {settings.data_dir / TOKEN_FILE}")
        if token:
            who = (f"dashboard: {base}/?token={token}\n"
                   f"API clients send `Authorization: Bearer <token>` (the token {kept}); "
                   f"decisions are recorded as {next(iter(people))}'s")
        else:
            who = (f"dashboard: {base}/?token=<your token>\n"
                   f"users from {users}: {', '.join(people)}; each sends their own token "
                   "(`Authorization: Bearer <token>`)")
        err_console.print(
            f"gateway for {settings.nats_url} (prefix {settings.prefix}) on {base}; "
            f"OpenAPI at /openapi.json\n{who}",
            markup=False, highlight=False, soft_wrap=True)
        if not _loopback(host):
            err_console.print(
                f"warning: listening on {host}, beyond this machine: anyone who can "
                "reach it and holds the token may run code on your team; the token "
                "travels in plain HTTP unless a TLS proxy is in front",
                markup=False, highlight=False, soft_wrap=True)
        await serve_http(bus, access, host=host, port=port, verbose=verbose)
        return 0

    command.on_bus(serve_gateway)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _url_host(host: str) -> str:
    """How a browser on this machine reaches a gateway listening on ``host``."""
    if host in ("", "0.0.0.0", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


@connection_flags()
def trace(
    run_id: Annotated[str, typer.Argument(help="The run to export (see `plancast runs`).")],
    otlp: Annotated[str | None, typer.Option(
        envvar="OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        help="OTLP/HTTP traces endpoint, e.g. http://localhost:4318/v1/traces.")] = None,
    *,
    connection: Connection,
    verbose: VerboseOpt = False,
) -> None:
    """Send a run's trace (once it has ended) to an OpenTelemetry collector."""
    try:
        from ..telemetry import send_run
    except ImportError as exc:
        print_error(f"plancast trace needs the otel extra ({exc.name} is missing): "
                    "pip install 'plancast[otel]'")
        raise typer.Exit(2) from None
    if not otlp:
        print_error("no collector: pass --otlp http://host:4318/v1/traces (or set "
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)")
        raise typer.Exit(2)
    command = begin(connection, verbose, "trace")

    async def export(bus: Bus) -> int:
        if not await known_run(bus, run_id):
            return 2
        events = [event async for event in follow(bus, run_id)]
        made = send_run(events, otlp)
        err_console.print(f"sent {made} spans of run {run_id} to {otlp}", markup=False,
                          highlight=False, soft_wrap=True)
        return 0

    command.on_bus(export)
