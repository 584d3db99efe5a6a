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

from protocols import (
    UNREADABLE,
    OutcomeRefused,
    PlanApproved,
    PlanRejected,
    RunEvent,
    RunFailed,
    RunFinished,
    Step,
    StepApproved,
    StepFailed,
)

from ..bus import Bus
from ..client import (
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
from .options import Connection, JsonOpt, Started, VerboseOpt, begin, connection_flags
from .render import render_plan_awaiting, render_saved_plans
from .terminal import console, print_error


@connection_flags()
def save(
    run_id: Annotated[str, typer.Argument(help="A finished run (see `plancast runs`).")],
    output: Annotated[Path | None, typer.Option("--output", "-o",
                                                help="File to write (default: stdout).")] = None,
    name: Annotated[str | None, typer.Option(
        help="Also keep it in the deployment under this name (`plancast plan list`; run it "
             "with `plancast run --plan NAME`).")] = None,
    *,
    connection: Connection,
    verbose: VerboseOpt = False,
) -> None:
    """Write the plan that answered a finished run: its goal and the steps that finished.

    Put ``{{name}}`` into the goal or a step's text to make a parameter, filled by
    ``plancast run --plan FILE --param name=value``.
    """
    command = begin(connection, verbose, "plan save")

    async def save_plan(bus: Bus) -> int:
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

    command.on_bus(save_plan)


@connection_flags()
def list_plans(
    *,
    connection: Connection,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """The plans kept in the deployment by name: goal, steps, parameters."""
    command = begin(connection, verbose, "plan list")

    async def list_stored(bus: Bus) -> int:
        found = await stored_plans(bus)
        if as_json:
            sys.stdout.buffer.write(msgspec.json.encode(found) + b"\n")
        else:
            render_saved_plans(found, console)
        return 0

    command.on_bus(list_stored)


DECISION_WAIT = 15.0
"""Seconds ``plan approve``/``reject`` wait to see whether the run took the decision."""


@connection_flags()
def show(
    run_id: Annotated[str, typer.Argument(help="A run that holds work for approval.")],
    *,
    connection: Connection,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Show what a run holds for approval: a plan round, steps at their gate (``--json``:
    ``{"plan": ..., "steps": [...]}``; edit the plan's steps for ``approve --edit``)."""
    command = begin(connection, verbose, "plan show")

    async def show_awaiting(bus: Bus) -> int:
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
            render_plan_awaiting(run_id, plan, console)
        for gate in gated:
            console.print(f"run {run_id}: step {gate.step_id} (attempt {gate.attempt}, role "
                          f"{gate.role}) awaits approval: {gate.reason}; "
                          f"{max(gate.deadline - time.time(), 0):.0f}s left", markup=False,
                          soft_wrap=True)
        return 0

    command.on_bus(show_awaiting)


StepOpt = Annotated[int | None, typer.Option(
    "--step", help="Decide on this step, held at its approval gate, instead of the plan.")]


@connection_flags()
def approve(
    run_id: Annotated[str, typer.Argument(help="A run that holds work for approval.")],
    edit: Annotated[Path | None, typer.Option(
        help="Approve these steps instead (JSON: a list of steps, or `plan show --json`'s "
             "output edited); checked like the model's plan.")] = None,
    step: StepOpt = None,
    by: Annotated[str, typer.Option(help="Who approves, for the run's record.")] = "",
    *,
    connection: Connection,
    verbose: VerboseOpt = False,
) -> None:
    """Approve the plan a run holds (or an edit of it), or one step at its gate: it runs."""
    command = begin(connection, verbose, "plan approve")
    try:
        steps = _edited_steps(edit) if edit is not None else None
    except PlanFileError as exc:  # the user's file: one line, not a traceback
        print_error(f"plancast plan approve: {exc}")
        raise typer.Exit(2) from None
    _decide(command, run_id, step, approved=True, steps=steps, reason="", by=by)


@connection_flags()
def reject(
    run_id: Annotated[str, typer.Argument(help="A run that holds work for approval.")],
    reason: Annotated[str, typer.Option(help="What is wrong: the planner's model reads it.")],
    step: StepOpt = None,
    by: Annotated[str, typer.Option(help="Who rejects, for the run's record.")] = "",
    *,
    connection: Connection,
    verbose: VerboseOpt = False,
) -> None:
    """Reject the plan a run holds (the planner's model writes it again, told why), or one
    step at its gate (it fails; its on_failure says what then)."""
    command = begin(connection, verbose, "plan reject")
    _decide(command, run_id, step, approved=False, steps=None, reason=reason, by=by)


def _decide(command: Started, run_id: str, step_id: int | None, *, approved: bool,
            steps: list[Step] | None, reason: str, by: str) -> None:
    """Send the decision, then say whether the run took it or refused it (an
    ``outcome.refused``), waiting at most DECISION_WAIT."""
    who = by or f"{getpass.getuser()}@{socket.gethostname()}"

    async def decide(bus: Bus) -> int:
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

    command.on_bus(decide, ensure_streams=True)


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
