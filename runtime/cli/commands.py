"""The ``plancast`` command line: the typer app and every command registered on it, from the
modules that define them (which never import this one). Conventions follow the ``nats``
CLI (``--nats``/``NATS_URL``, ``--creds``) and the openai client (``OPENAI_API_KEY``,
``OPENAI_BASE_URL``)."""

from __future__ import annotations

from importlib.metadata import version as package_version
from typing import Annotated

import typer

from . import auth, deployment, local, plans, runs, scripted, serve
from .terminal import console, print_error, reader_gone

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


# In this order in `plancast --help` (typer lists the groups after the commands).
app.command()(deployment.schema)
app.command()(deployment.roles)
app.command()(deployment.worker)
app.command()(deployment.up)
app.command("status")(deployment.status)
app.command()(auth.provision)
app.command("local-model")(local.local_model)
app.command()(runs.demo)
app.command("scripted-model")(scripted.scripted_model)
app.command()(runs.run)
app.command("cancel")(runs.cancel_command)
app.command()(runs.watch)
app.command()(runs.runs)
app.command()(serve.serve)
app.command()(serve.trace)

auth_app = typer.Typer(help="Per-role NATS users: least privilege on a shared server.",
                       no_args_is_help=True)
auth_app.command("init")(auth.init)
app.add_typer(auth_app, name="auth")

plan_app = typer.Typer(help="Reusable plans: save the plan that answered a run; run it "
                            "again with `plancast run --plan FILE`.", no_args_is_help=True)
plan_app.command("save")(plans.save)
plan_app.command("list")(plans.list_plans)
plan_app.command("show")(plans.show)
plan_app.command("approve")(plans.approve)
plan_app.command("reject")(plans.reject)
app.add_typer(plan_app, name="plan")


_USAGE_ERROR: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
"""Click's usage error (typer vendors click in newer versions, so it is found, not imported)."""


def main() -> None:
    """The ``plancast`` console script: usage errors are one line and exit 2."""
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
        reader_gone()
    raise SystemExit(code if isinstance(code, int) else 0)
