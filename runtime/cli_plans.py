"""``plancast plan``: review a plan a run holds for approval (``show``, ``approve``,
``reject``), and keep the plan that answered a run (``save``) to run it again with
``plancast run --plan FILE [--param NAME=VALUE ...]``."""

from __future__ import annotations

import getpass
import socket
import sys
import time
from pathlib import Path
from typing import Annotated

import anyio
import msgspec
import typer
from rich.markup import escape
from rich.table import Table

from protocols import (
    OutcomeRefused,
    PlanApproved,
    PlanAwaitingApproval,
    PlanRejected,
    RunEvent,
    RunFailed,
    RunFinished,
    Step,
    StepApproved,
    StepFailed,
)
from protocols.codec import UNREADABLE

from .bus import open_bus
from .cli import (
    ConnectTimeoutOpt,
    CredsOpt,
    JsonOpt,
    NatsOpt,
    PrefixOpt,
    VerboseOpt,
    _run_async,
    app,
)
from .cli_runs import _deployment
from .cli_setup import build_settings, console, print_error, setup_logging
from .client import (
    NothingAwaitsApproval,
    PlanFileError,
    awaiting_plan,
    awaiting_steps,
    decide_plan,
    decide_step,
    dump,
    events_so_far,
    follow,
    last_event,
    parameters,
    plan_of_run,
    read_run,
    store_plan,
    stored_plans,
)
from .config import Settings

plan_app = typer.Typer(help="Reusable plans: save the plan that answered a run; run it "
                            "again with `plancast run --plan FILE`.", no_args_is_help=True)
app.add_typer(plan_app, name="plan")


@plan_app.command("save")
def save(
    run_id: Annotated[str, typer.Argument(help="A finished run (see `plancast runs`).")],
    output: Annotated[Path | None, typer.Option("--output", "-o",
                                                help="File to write (default: stdout).")] = None,
    name: Annotated[str | None, typer.Option(
        help="Also keep it in the deployment under this name (`plancast plan list`; run it "
             "with `plancast run --plan NAME`).")] = None,
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
            if name is not None:
                await store_plan(bus, name, plan)
        names = ", ".join(sorted(parameters(plan))) or "none"
        where = [f"{output}" if output else "", f"the deployment as {name!r}" if name else ""]
        if output is None and name is None:
            sys.stdout.buffer.write(dump(plan))
            return 0
        if output is not None:
            output.write_bytes(dump(plan))
        console.print(f"saved {len(plan.steps)} steps of run {run_id} to "
                      f"{' and '.join(w for w in where if w)} (parameters: {names})",
                      markup=False)
        return 0

    _run_async(main, verbose=verbose)


@plan_app.command("list")
def list_plans(
    nats: NatsOpt = None,
    creds: CredsOpt = None,
    prefix: PrefixOpt = None,
    connect_timeout: ConnectTimeoutOpt = None,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """The plans kept in the deployment by name: goal, steps, parameters."""
    setup_logging(verbose, quiet=True)
    settings = _deployment(build_settings(nats, creds, prefix, connect_timeout), "plan list")

    async def main() -> int:
        async with open_bus(settings, ensure_streams=False) as bus:
            found = await stored_plans(bus)
        if as_json:
            sys.stdout.buffer.write(msgspec.json.encode(found) + b"\n")
            return 0
        table = Table(title=f"saved plans ({len(found)})", title_justify="left")
        for column in ("name", "goal", "steps", "parameters", "from run"):
            table.add_column(column)
        for name, plan in found.items():
            table.add_row(name, escape(plan.goal[:60]), str(len(plan.steps)),
                          ", ".join(sorted(parameters(plan))), plan.source_run)
        console.print(table)
        return 0

    _run_async(main, verbose=verbose)


DECISION_WAIT = 15.0
"""Seconds ``plan approve``/``reject`` wait to see whether the run took the decision."""


@plan_app.command("show")
def show(
    run_id: Annotated[str, typer.Argument(help="A run that holds work for approval.")],
    nats: NatsOpt = None,
    creds: CredsOpt = None,
    prefix: PrefixOpt = None,
    connect_timeout: ConnectTimeoutOpt = None,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Show what a run holds for approval: a plan round, steps at their gate (``--json``:
    ``{"plan": ..., "steps": [...]}``; edit the plan's steps for ``approve --edit``)."""
    setup_logging(verbose, quiet=True)
    settings = _deployment(build_settings(nats, creds, prefix, connect_timeout), "plan show")

    async def main() -> int:
        async with open_bus(settings, ensure_streams=False) as bus:
            events = await events_so_far(bus, run_id)
        plan, gated = awaiting_plan(events), list(awaiting_steps(events).values())
        if plan is None and not gated:
            raise NothingAwaitsApproval(f"nothing of run {run_id} awaits approval now (see "
                                        f"`plancast watch {run_id}`)")
        if as_json:
            shown = msgspec.json.encode({"plan": plan, "steps": gated})
            sys.stdout.buffer.write(msgspec.json.format(shown, indent=2) + b"\n")
            return 0
        if plan is not None:
            _show_plan(run_id, plan)
        for gate in gated:
            console.print(f"run {run_id}: step {gate.step_id} (attempt {gate.attempt}, role "
                          f"{gate.role}) awaits approval: {gate.reason}; "
                          f"{max(gate.deadline - time.time(), 0):.0f}s left", markup=False,
                          soft_wrap=True)
        return 0

    _run_async(main, verbose=verbose)


def _show_plan(run_id: str, plan: PlanAwaitingApproval) -> None:
    console.print(f"run {run_id}: plan of round {plan.round} awaits approval "
                  f"({plan.reviewer}, {max(plan.deadline - time.time(), 0):.0f}s left; "
                  f"digest {plan.digest})", markup=False, soft_wrap=True)
    table = Table()
    for column in ("id", "role", "does", "after"):
        table.add_column(column)
    for step in plan.steps:
        does = (f"{step.tool} {msgspec.json.encode(step.args).decode()}" if step.tool
                else step.instruction or "")
        table.add_row(str(step.id), step.role, escape(does[:200]),
                      ", ".join(map(str, step.depends_on)))
    console.print(table)


StepOpt = Annotated[int | None, typer.Option(
    "--step", help="Decide on this step, held at its approval gate, instead of the plan.")]


@plan_app.command("approve")
def approve(
    run_id: Annotated[str, typer.Argument(help="A run that holds work for approval.")],
    edit: Annotated[Path | None, typer.Option(
        help="Approve these steps instead (JSON: a list of steps, or `plan show --json`'s "
             "output edited); checked like the model's plan.")] = None,
    step: StepOpt = None,
    by: Annotated[str, typer.Option(help="Who approves, for the run's record.")] = "",
    nats: NatsOpt = None,
    creds: CredsOpt = None,
    prefix: PrefixOpt = None,
    connect_timeout: ConnectTimeoutOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Approve the plan a run holds (or an edit of it), or one step at its gate: it runs."""
    setup_logging(verbose, quiet=True)
    settings = _deployment(build_settings(nats, creds, prefix, connect_timeout),
                           "plan approve")
    steps = _edited_steps(edit) if edit is not None else None
    _decide(settings, run_id, step, approved=True, steps=steps, reason="", by=by,
            verbose=verbose)


@plan_app.command("reject")
def reject(
    run_id: Annotated[str, typer.Argument(help="A run that holds work for approval.")],
    reason: Annotated[str, typer.Option(help="What is wrong: the planner's model reads it.")],
    step: StepOpt = None,
    by: Annotated[str, typer.Option(help="Who rejects, for the run's record.")] = "",
    nats: NatsOpt = None,
    creds: CredsOpt = None,
    prefix: PrefixOpt = None,
    connect_timeout: ConnectTimeoutOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Reject the plan a run holds (the planner's model writes it again, told why), or one
    step at its gate (it fails; its on_failure says what then)."""
    setup_logging(verbose, quiet=True)
    settings = _deployment(build_settings(nats, creds, prefix, connect_timeout), "plan reject")
    _decide(settings, run_id, step, approved=False, steps=None, reason=reason, by=by,
            verbose=verbose)


def _decide(settings: Settings, run_id: str, step_id: int | None, *, approved: bool,
            steps: list[Step] | None, reason: str, by: str, verbose: bool) -> None:
    """Send the decision, then say whether the run took it or refused it (an
    ``outcome.refused``), waiting at most DECISION_WAIT."""
    who = by or f"{getpass.getuser()}@{socket.gethostname()}"

    async def main() -> int:
        async with open_bus(settings) as bus:
            before = await last_event(bus, run_id)  # what comes after answers this decision
            if step_id is None:
                plan = await decide_plan(bus, run_id, approved=approved, steps=steps,
                                         reason=reason, by=who)
                what, kind = f"plan of round {plan.round}", "plan.decision"
            else:
                gate = await decide_step(bus, run_id, step_id, approved=approved,
                                         reason=reason, by=who)
                what, kind = f"step {step_id} (attempt {gate.attempt})", "step.decision"
            with anyio.move_on_after(DECISION_WAIT):
                async for event in follow(bus, run_id):
                    if event.seq <= (before.seq if before else 0):
                        continue
                    if answer := _answer(event, step_id):
                        console.print(f"run {run_id}: {what} {answer}", markup=False)
                        return 0
                    if isinstance(event, OutcomeRefused) and event.kind == kind:
                        print_error(f"the run refused the decision: {event.reason}")
                        return 1
            print_error(f"sent; run {run_id} has not taken the decision within "
                        f"{DECISION_WAIT:g}s (see `plancast watch {run_id}`)")
            return 1

    _run_async(main, verbose=verbose)


def _answer(event: RunEvent, step_id: int | None) -> str:
    """What the event says of the decision on the plan (``step_id`` None) or the step."""
    if step_id is None:
        if isinstance(event, PlanApproved):
            return "approved"
        if isinstance(event, PlanRejected):
            return "rejected: the planner writes it again"
    elif isinstance(event, StepApproved) and event.step_id == step_id:
        return "approved: it runs now"
    elif isinstance(event, StepFailed) and event.step_id == step_id:
        return "rejected: it failed"
    return ""


def _edited_steps(path: Path) -> list[Step]:
    """The steps of an --edit file: a list of steps, or an object with ``steps``."""
    try:
        raw = msgspec.json.decode(path.read_bytes())
        if isinstance(raw, dict):  # `plan show --json`'s output, or a plan event
            raw = (raw.get("plan") or raw).get("steps")
        return msgspec.convert(raw, list[Step])
    except FileNotFoundError:
        raise PlanFileError(f"--edit {path}: no such file") from None
    except (*UNREADABLE, msgspec.ValidationError) as exc:
        raise PlanFileError(f"--edit {path}: not a list of steps ({exc}); start from "
                            "`plancast plan show RUN_ID --json`") from None
