"""The commands about runs: ``demo``, ``run``, ``watch``, ``runs`` and ``cancel``.

``run`` and ``watch`` show the same live view of a run's events (or print them as NDJSON);
the first Ctrl-C in ``run`` cancels the run, in ``watch`` it only stops watching.
"""

from __future__ import annotations

import enum
import secrets
import signal
import socket
import sys
import tempfile
from pathlib import Path
from typing import Annotated, NoReturn

import anyio
import msgspec
import typer
from rich.live import Live
from rich.text import Text

from protocols import RunEvent, RunFailed, RunFinished, RunRequest, SavedPlan, encode

from ..bus import Bus, open_bus
from ..client import (
    PlanFileError,
    cancel,
    check_plan,
    collect_runs,
    fill,
    follow,
    follow_tree,
    load,
    parse_params,
    stored_plan,
    submit,
)
from ..config import Settings
from ..dag import PlanValidationError
from ..testing import load_scenario, open_scripted_model_server
from ..tools import builtin_tools, find_bwrap
from ..worker import open_deployment, preflight
from .demo import DEMO_GOAL, demo_scenario_path, demo_team
from .options import (
    Connection,
    JsonOpt,
    TeamOpt,
    VerboseOpt,
    begin,
    connection_flags,
    known_run,
    run_async,
    team_file,
    team_tools,
)
from .render import render_runs
from .served import DEFAULT_TEAM, ServedTeam, check_same_team, given_team
from .terminal import console, err_console, print_error, setup_logging
from .view import RunView


async def _run_and_show(bus: Bus, request: RunRequest, as_json: bool) -> int:
    """Submit, then show the run (the first Ctrl-C cancels it)."""
    accepted = await submit(bus, request)
    return await _show(bus, accepted.run_id, as_json, cancels=True)


async def _show(bus: Bus, run_id: str, as_json: bool, *, cancels: bool,
                interrupts: bool = True) -> int:
    """Follow the events to the end, print the outcome; 0 if the run finished.

    With ``cancels``, the first Ctrl-C cancels the run and waits (up to CANCEL_WAIT) for
    it to end, a second stops waiting; without, Ctrl-C stops watching. Without
    ``interrupts``, Ctrl-C is the caller's."""
    view = RunView(run_id)
    async with anyio.create_task_group() as tg:
        if interrupts:
            tg.start_soon(_on_interrupt, bus, run_id, tg.cancel_scope, cancels)
        if as_json:  # the run's events and its sub-team runs', each with its run id
            async def write(rid: str, event: RunEvent) -> None:
                view.apply_tree(rid, event)
                sys.stdout.write(encode(event).decode() + "\n")
                sys.stdout.flush()

            await follow_tree(bus, run_id, write)
        else:
            with Live(view.render(console.width), console=console, refresh_per_second=8) as live:
                async def show(rid: str, event: RunEvent) -> None:
                    view.apply_tree(rid, event)
                    live.update(view.render(console.width))

                await follow_tree(bus, run_id, show)
        tg.cancel_scope.cancel()
    if view.outcome is None:
        if cancels:
            print_error(f"stopped waiting: run {run_id} may still be going (see `plancast "
                        "status`)")
        return 130
    if not as_json:
        # The answer and the reason come from the run: Text, never read as markup.
        if isinstance(view.outcome, RunFinished):
            console.print(Text.assemble("\n", ("answer:", "bold green"), " ",
                                        view.outcome.answer))
        else:
            console.print(Text.assemble("\n", ("run failed", "bold red"),
                                        f" ({view.outcome.stage}): {view.outcome.reason}"))
    if isinstance(view.outcome, RunFailed) and view.outcome.cause == "cancelled":
        return 130
    return 0 if isinstance(view.outcome, RunFinished) else 1


CANCEL_WAIT = 15.0
"""Seconds ``plancast run`` waits for a run it cancelled on Ctrl-C to end."""


async def _on_interrupt(bus: Bus, run_id: str, following: anyio.CancelScope,
                        cancels: bool) -> None:
    with anyio.open_signal_receiver(signal.SIGINT) as interrupts:
        async for _ in interrupts:
            if not cancels:
                following.cancel()
                return
            print_error(f"cancelling run {run_id} (Ctrl-C again to stop waiting for it)")
            await cancel(bus, run_id, "Ctrl-C", source=f"plancast run on {socket.gethostname()}")
            following.deadline = anyio.current_time() + CANCEL_WAIT
            break
        async for _ in interrupts:
            following.cancel()
            return


def demo(
    goal: Annotated[str | None, typer.Argument(hidden=True)] = None,
    as_json: JsonOpt = False,
    time_scale: Annotated[float, typer.Option(min=0.0,
                                              help="Multiply the scripted latencies.")] = 1.0,
    serve: Annotated[bool, typer.Option(
        "--serve", help="Also serve the dashboard (on 127.0.0.1) and print its address, "
                        "opening the demo's run; keep serving after the run until Ctrl-C.")
    ] = False,
    port: Annotated[int, typer.Option(min=0, max=65535,
                                      help="With --serve: the port (0: a free one).")] = 0,
    verbose: VerboseOpt = False,
) -> None:
    """Run a whole team offline: embedded NATS, a SCRIPTED model, live progress.

    The scripted model answers the demo's own goal only; `plancast run` runs yours."""
    setup_logging(verbose, quiet=True)
    if goal not in (None, DEMO_GOAL):  # it would answer its own goal under yours
        _usage_error(f"the demo's scripted model answers only its own goal ({DEMO_GOAL!r}): "
                     "run a goal of yours with `plancast run \"...\"` and a team file (see "
                     "the README)")

    async def main() -> int:
        scenario = load_scenario(Path(str(demo_scenario_path())))
        with tempfile.TemporaryDirectory(prefix="plancast-demo-") as tmp:
            async with open_scripted_model_server(scenario, time_scale=time_scale) as model:
                if not as_json:
                    console.print(Text.assemble(
                        ("plancast demo", "bold"), " - every model answer comes from a ",
                        ("scripted model", "bold yellow"), f" at {model.base_url}, not a "
                        "real LLM."))
                settings = Settings(nats_url=None, data_dir=Path(tmp))
                # The demo's code comes from its script, not from a model: without
                # bubblewrap it runs unsandboxed rather than not at all, and says so.
                sandbox = "bwrap" if find_bwrap() else "none"
                if sandbox == "none" and not as_json:
                    console.print("(bubblewrap is not installed: the demo's scripted python "
                                  "step runs unsandboxed; a real team refuses to)",
                                  markup=False)
                async with open_deployment(settings, demo_team(model.base_url),
                                           builtin_tools(sandbox=sandbox)) as bus:
                    if serve:
                        return await _serve_demo(bus, RunRequest(goal=DEMO_GOAL), as_json,
                                                port=port, verbose=verbose)
                    return await _run_and_show(bus, RunRequest(goal=DEMO_GOAL), as_json)

    run_async(main, verbose=verbose)


async def _serve_demo(bus: Bus, request: RunRequest, as_json: bool, *, port: int,
                      verbose: bool) -> int:
    """``plancast demo --serve``: the gateway and its dashboard on 127.0.0.1, with a token
    made for this demo; the run shown here and there, then the dashboard served until
    Ctrl-C or SIGTERM, which end it all cleanly (the run's code then, 130 if it had not
    ended)."""
    try:
        from ..gateway import Access, gateway_user, serving
    except ImportError as exc:
        print_error(f"plancast demo --serve needs the serve extra ({exc.name} is missing): "
                    "pip install 'plancast[serve]'")
        return 2
    token = secrets.token_urlsafe(32)  # this demo's only: its deployment goes with it
    access = Access.of({gateway_user(): token}, bound="127.0.0.1")
    code: int | None = None
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with serving(bus, access, host="127.0.0.1", port=port, verbose=verbose) as bound, \
                anyio.create_task_group() as tg:
            async def stop_on_signal() -> None:
                async for _ in signals:
                    tg.cancel_scope.cancel()
                    return

            tg.start_soon(stop_on_signal)
            accepted = await submit(bus, request)
            url = f"http://127.0.0.1:{bound}/?token={token}#{accepted.run_id}"
            err_console.print(f"dashboard of the demo's run: {url}", markup=False,
                              highlight=False, soft_wrap=True)
            code = await _show(bus, accepted.run_id, as_json, cancels=False, interrupts=False)
            err_console.print(f"the run has ended; the dashboard is still at {url} (Ctrl-C "
                              "to stop)", markup=False, highlight=False, soft_wrap=True)
            await anyio.sleep_forever()
    return 130 if code is None else code


class ReviewMode(enum.Enum):
    """``plancast run --review-plan``."""

    off = "off"
    human = "human"
    auto = "auto"


@connection_flags()
def run(
    goal: Annotated[str | None, typer.Argument(
        help="What the team should achieve (with --plan: the plan's own goal).")] = None,
    team: TeamOpt = None,
    *,
    connection: Connection,
    as_json: JsonOpt = False,
    max_replans: Annotated[int, typer.Option(help="Replan rounds allowed.")] = 1,
    max_steps: Annotated[int, typer.Option(help="Most steps in one plan.")] = 64,
    plan: Annotated[str | None, typer.Option(
        help="Run a saved plan with no planner model call: a file (`plancast plan save -o`) "
             "or a name stored in the deployment (`plancast plan save --name`).")] = None,
    param: Annotated[list[str] | None, typer.Option(
        help="NAME=VALUE for a {{NAME}} of the plan (repeatable).")] = None,
    review_plan: Annotated[ReviewMode | None, typer.Option(
        help="Hold each plan for approval (`plancast plan approve`) or the critic's review; "
             "default: the team's review_plan.")] = None,
    verbose: VerboseOpt = False,
) -> None:
    """Run a goal. With --nats, hand it to the workers there; else to the local deployment
    (`plancast up`), if one runs, which must serve the team given; else run the team here."""
    command = begin(connection, verbose, "run", needs="any")
    settings = command.settings
    stored = plan is not None and not _is_file(plan)  # a name in the deployment's bucket
    if stored and not settings.nats_url:
        _usage_error(f"--plan {plan}: no such file, and a plan stored by name needs a "
                     "deployment: pass --nats (or start one with `plancast up`)")

    def request_of(saved: SavedPlan | None) -> RunRequest:
        made = _request(goal, saved, param or [], max_replans=max_replans,
                        max_steps=max_steps)
        if review_plan is None:
            return made
        return msgspec.structs.replace(made, review_plan=review_plan.value)

    try:
        request = None if stored else request_of(load(Path(plan)) if plan else None)
    except PlanFileError as exc:
        _usage_error(str(exc))

    async def main() -> int:
        if settings.nats_url:
            if command.local and (given := given_team(team)) is not None:
                check_same_team(settings, "run", given, team_file(given))
            async with open_bus(settings, refusal_is_final=command.refusal_is_final) as bus:
                wanted = request or request_of(await stored_plan(bus, plan or ""))
                return await _run_and_show(bus, wanted, as_json)
        assert request is not None
        path = team or DEFAULT_TEAM
        team_config = team_file(path)
        tools = team_tools(team_config)
        preflight(team_config, tools)
        if request.plan is not None:  # refused here rather than by the planner
            try:
                check_plan(request.plan, team_config, team_config.tool_names()
                                 | set(tools.names()), max_steps=request.max_steps)
            except PlanValidationError as exc:
                raise PlanFileError(
                    f"{plan}: the plan cannot run on this team: {exc}") from None
        async with open_deployment(settings, team_config, tools,
                                   serves=ServedTeam.of(path, team_config).encode()) as bus:
            return await _run_and_show(bus, request, as_json)

    command.run(main)


def _is_file(plan: str) -> bool:
    """``--plan`` names a file (else a plan stored in the deployment)."""
    return Path(plan).exists() or plan.endswith(".json") or "/" in plan


def _request(goal: str | None, saved: SavedPlan | None, params: list[str], *,
             max_replans: int, max_steps: int) -> RunRequest:
    """The run to submit: a goal for the planner's model, or a saved plan filled in;
    PlanFileError says what is missing."""
    if saved is None:
        if params:
            raise PlanFileError("--param fills a saved plan: give --plan FILE|NAME too")
        if not goal:
            raise PlanFileError("give a goal (plancast run \"...\"), or a saved plan "
                                      "with --plan FILE|NAME")
        return RunRequest(goal=goal, max_replans=max_replans, max_steps=max_steps)
    filled = fill(saved, parse_params(params))
    return RunRequest(goal=goal or filled.goal, plan=filled.steps, max_replans=max_replans,
                      max_steps=max(max_steps, len(filled.steps)))


def _usage_error(message: str) -> NoReturn:
    print_error(message)
    raise typer.Exit(2)


@connection_flags()
def cancel_command(
    run_id: Annotated[str, typer.Argument(help="The run to stop.")],
    reason: Annotated[str, typer.Option(help="Why (shown in the run's last event).")] = "",
    *,
    connection: Connection,
    verbose: VerboseOpt = False,
) -> None:
    """Ask the planner to stop a run; waits until it has ended (a run.failed, "cancelled").

    A run the deployment does not know is an error at once (exit 2)."""
    command = begin(connection, verbose, "cancel")

    async def stop(bus: Bus) -> int:
        if not await known_run(bus, run_id):  # at once: no planner will ever answer for it
            return 2
        await cancel(bus, run_id, reason, source=f"plancast cancel on {socket.gethostname()}")
        with anyio.move_on_after(CANCEL_WAIT):
            async for event in follow(bus, run_id):
                if isinstance(event, RunFailed | RunFinished):
                    ended = "finished" if isinstance(event, RunFinished) else "failed"
                    console.print(f"run {run_id} {ended}: "
                                  f"{getattr(event, 'reason', '') or 'with an answer'}",
                                  markup=False)
                    return 0
        print_error(f"asked to cancel run {run_id}; it has not ended within "
                    f"{CANCEL_WAIT:g}s (see `plancast status`)")
        return 1

    command.on_bus(stop, ensure_streams=True)


@connection_flags()
def watch(
    run_id: Annotated[str, typer.Argument(help="The run to show (see `plancast runs`).")],
    *,
    connection: Connection,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Show any run, live or ended, from its first event (Ctrl-C only stops watching).

    Exits 0 if the run finished, 1 if it failed, 130 on Ctrl-C.
    """
    command = begin(connection, verbose, "watch")

    async def show(bus: Bus) -> int:
        if not await known_run(bus, run_id):
            return 2
        return await _show(bus, run_id, as_json, cancels=False)

    command.on_bus(show)


@connection_flags()
def runs(
    *,
    connection: Connection,
    limit: Annotated[int, typer.Option(min=1, help="Show the most recent N runs.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
    verbose: VerboseOpt = False,
) -> None:
    """List the most recent runs: id, goal, status, age, steps done/total, tokens."""
    command = begin(connection, verbose, "runs")

    async def list_runs(bus: Bus) -> int:
        found = await collect_runs(bus, active_only=False, limit=limit)
        if as_json:
            sys.stdout.write(msgspec.json.encode(found).decode() + "\n")
        else:
            render_runs(found, console, title=f"recent runs ({len(found)})")
        return 0

    command.on_bus(list_runs)
