"""``plancast scripted-model``: the demo's scripted OpenAI-compatible model, serving a
scenario of your own, so any team runs offline (no key, no network) with its models'
``base_url`` pointed at it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..testing import ScriptedModelServer, load_scenario, scripted_banner, serve_until_stopped
from .options import VerboseOpt, run_async
from .terminal import console, err_console, print_error


def scripted_model(
    scenario: Annotated[Path, typer.Argument(
        help="Scenario file (.toml or .json): the rules the model answers from.")],
    port: Annotated[int, typer.Option(min=0, max=65535,
                                      help="Port to listen on (0: a free one).")] = 8000,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    time_scale: Annotated[float | None, typer.Option(
        min=0.0, help="Multiply every scripted delay (default: the scenario's).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="Do not log each request.")] = False,
    verbose: VerboseOpt = False,
) -> None:
    """Serve a SCRIPTED (fake, offline) OpenAI-compatible model from a scenario file.

    Prints the base_url to put in a team file; Ctrl-C or SIGTERM stops it."""

    async def main() -> int:
        loaded = load_scenario(scenario)  # a bad file: one line naming the field, exit 2

        def log(line: str) -> None:
            err_console.print(line, markup=False, highlight=False, soft_wrap=True)

        def ready(server: ScriptedModelServer) -> None:
            for line in scripted_banner(server, str(scenario)):
                console.print(line, markup=False, highlight=False, soft_wrap=True)

        try:
            await serve_until_stopped(loaded, host=host, port=port, time_scale=time_scale,
                                      log=None if quiet else log, ready=ready)
        except OSError as exc:
            print_error(f"cannot listen on {host}:{port} ({exc.strerror or exc}): pick "
                        "another --port (0: a free one)")
            return 2
        return 0

    run_async(main, verbose=verbose)
