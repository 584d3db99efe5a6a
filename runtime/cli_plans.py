"""``plancast plan save``: keep the plan that answered a run, to run it again with
``plancast run --plan FILE [--param NAME=VALUE ...]``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from protocols import RunFailed, RunFinished

from .cli import ConnectTimeoutOpt, CredsOpt, NatsOpt, PrefixOpt, VerboseOpt, _run_async, app
from .cli_runs import _deployment
from .cli_setup import build_settings, console, print_error, setup_logging
from .connection import open_bus
from .plans import dump, last_event, parameters, plan_of_run
from .status import read_run

plan_app = typer.Typer(help="Reusable plans: save the plan that answered a run; run it "
                            "again with `plancast run --plan FILE`.", no_args_is_help=True)
app.add_typer(plan_app, name="plan")


@plan_app.command("save")
def save(
    run_id: Annotated[str, typer.Argument(help="A finished run (see `plancast runs`).")],
    output: Annotated[Path | None, typer.Option("--output", "-o",
                                                help="File to write (default: stdout).")] = None,
    nats: NatsOpt = None,
    creds: CredsOpt = None,
    prefix: PrefixOpt = None,
    connect_timeout: ConnectTimeoutOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Write the plan that answered a finished run: its goal and the steps that finished.

    Put ``{{name}}`` into the goal or a step's text to make a parameter, filled by
    ``plancast run --plan FILE --param name=value``.
    """
    setup_logging(verbose, quiet=True)
    settings = _deployment(build_settings(nats, creds, prefix, connect_timeout), "plan save")

    async def main() -> int:
        async with open_bus(settings, ensure_streams=False) as bus:
            if await read_run(bus, run_id) is None:
                print_error(f"no run {run_id} under prefix {bus.prefix!r}: list them with "
                            "`plancast runs`")
                return 2
            if not isinstance(await last_event(bus, run_id), RunFinished | RunFailed):
                print_error(f"run {run_id} is still going; save its plan once it has finished "
                            f"(`plancast watch {run_id}`)")
                return 2
            plan = await plan_of_run(bus, run_id)
        if output is None:
            sys.stdout.buffer.write(dump(plan))
            return 0
        output.write_bytes(dump(plan))
        names = ", ".join(sorted(parameters(plan))) or "none"
        console.print(f"saved {len(plan.steps)} steps of run {run_id} to {output} "
                      f"(parameters: {names})", markup=False)
        return 0

    _run_async(main, verbose=verbose)
