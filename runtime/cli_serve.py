"""Progress for tools outside NATS: ``plancast serve`` (the HTTP/SSE gateway and dashboard,
``runtime.gateway``, on uvicorn) and ``plancast trace`` (a run as OpenTelemetry spans)."""

from __future__ import annotations

from typing import Annotated

import typer

from .cli import ConnectTimeoutOpt, CredsOpt, NatsOpt, PrefixOpt, VerboseOpt, _run_async, app
from .cli_runs import _deployment, _known_run
from .cli_setup import build_settings, err_console, print_error, setup_logging
from .client import follow
from .connection import open_bus


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on.")] = 8080,
    nats: NatsOpt = None,
    creds: CredsOpt = None,
    prefix: PrefixOpt = None,
    connect_timeout: ConnectTimeoutOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Serve the HTTP gateway: submit runs, list them, stream their events (SSE)."""
    setup_logging(verbose, quiet=True)
    try:
        import uvicorn

        from .gateway import gateway
    except ImportError as exc:
        print_error(f"plancast serve needs the serve extra ({exc.name} is missing): "
                    "pip install 'plancast[serve]'")
        raise typer.Exit(2) from None
    settings = _deployment(build_settings(nats, creds, prefix, connect_timeout), "serve")

    async def main() -> int:
        # Connected before serving: an unreachable NATS is one line, not a failed start-up.
        async with open_bus(settings, ensure_streams=False) as bus:
            config = uvicorn.Config(gateway(bus), host=host, port=port, lifespan="off",
                                    log_level="debug" if verbose else "warning")
            err_console.print(f"gateway for {settings.nats_url} (prefix {settings.prefix}) "
                              f"on http://{host}:{port}; OpenAPI at /openapi.json",
                              markup=False, highlight=False, soft_wrap=True)
            await uvicorn.Server(config).serve()
        return 0

    _run_async(main, verbose=verbose)


@app.command()
def trace(
    run_id: Annotated[str, typer.Argument(help="The run to export (see `plancast runs`).")],
    otlp: Annotated[str | None, typer.Option(
        envvar="OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        help="OTLP/HTTP traces endpoint, e.g. http://localhost:4318/v1/traces.")] = None,
    nats: NatsOpt = None,
    creds: CredsOpt = None,
    prefix: PrefixOpt = None,
    connect_timeout: ConnectTimeoutOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Send a run's trace (once it has ended) to an OpenTelemetry collector."""
    setup_logging(verbose, quiet=True)
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor

        from .traces import export_run
    except ImportError as exc:
        print_error(f"plancast trace needs the otel extra ({exc.name} is missing): "
                    "pip install 'plancast[otel]'")
        raise typer.Exit(2) from None
    if not otlp:
        print_error("no collector: pass --otlp http://host:4318/v1/traces (or set "
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)")
        raise typer.Exit(2)
    settings = _deployment(build_settings(nats, creds, prefix, connect_timeout), "trace")

    async def main() -> int:
        async with open_bus(settings, ensure_streams=False) as bus:
            if not await _known_run(bus, run_id):
                return 2
            events = [event async for event in follow(bus, run_id)]
        exporter = OTLPSpanExporter(endpoint=otlp, timeout=10)
        provider = TracerProvider(resource=Resource.create({"service.name": "plancast"}))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        made = export_run(events, provider)
        provider.shutdown()
        err_console.print(f"sent {made} spans of run {run_id} to {otlp}", markup=False,
                          highlight=False, soft_wrap=True)
        return 0

    _run_async(main, verbose=verbose)
