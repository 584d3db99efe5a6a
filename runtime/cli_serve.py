"""``plancast serve``: the HTTP/SSE gateway (``runtime.gateway``) on uvicorn."""

from __future__ import annotations

from typing import Annotated

import typer

from .cli import ConnectTimeoutOpt, CredsOpt, NatsOpt, PrefixOpt, VerboseOpt, _run_async, app
from .cli_runs import _deployment
from .cli_setup import build_settings, err_console, print_error, setup_logging


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
        config = uvicorn.Config(gateway(settings), host=host, port=port, lifespan="on",
                                log_level="debug" if verbose else "warning")
        server = uvicorn.Server(config)
        err_console.print(f"gateway for {settings.nats_url} (prefix {settings.prefix}) on "
                          f"http://{host}:{port}; OpenAPI at /openapi.json", markup=False,
                          highlight=False, soft_wrap=True)
        await server.serve()
        return 0

    _run_async(main, verbose=verbose)
