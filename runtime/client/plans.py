"""Reusable plans: keep the plan that answered a run, fill in its parameters, run it again.

A saved plan is the steps that finished in a finished run (across its plan rounds, so a
replan's fix is kept and its failed first try is not), with the goal. Running it hands
those steps to the planner as the first plan: no planner model call; if a step fails, the
replan asks the model as usual. ``{{name}}`` in the goal or in any step's text is a
parameter, filled from ``--param name=value``. A plan is checked against the team before
it is sent, and again by the planner, like any plan a model writes.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import msgspec

from protocols import (
    UNREADABLE,
    RunFailed,
    RunFinished,
    RunStarted,
    SavedPlan,
    Step,
    StepFinished,
    StepPlanned,
    plans_bucket,
)

from ..bus import BucketNotFoundError, Bus, KeyNotFoundError, current_values
from ..config import TeamConfig
from ..dag import PlanValidationError, Scheduler
from .errors import PlanFileError
from .runs import follow

PARAMETER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
"""``{{name}}``: a parameter of a saved plan."""


async def plan_of_run(bus: Bus, run_id: str) -> SavedPlan:
    """The plan that answered a finished run, read from its events (call it for a run that
    has ended: it follows the run to its end)."""
    planned: dict[int, Step] = {}
    finished: set[int] = set()
    goal = ""
    async for event in follow(bus, run_id):
        if isinstance(event, StepPlanned):
            planned[event.step.id] = event.step
        elif isinstance(event, StepFinished):
            finished.add(event.step_id)
        elif isinstance(event, RunFailed):
            raise PlanFileError(f"run {run_id} failed ({event.reason}); only a finished run's "
                                "plan can be saved")
        elif isinstance(event, RunFinished):
            break
        elif isinstance(event, RunStarted):
            goal = event.goal
    steps = [planned[sid] for sid in sorted(finished) if sid in planned]
    if not steps:
        raise PlanFileError(f"run {run_id} finished without a step to save")
    return SavedPlan(goal=goal, steps=steps, source_run=run_id)


def dump(plan: SavedPlan) -> bytes:
    """The plan as indented JSON, for a file a person may edit."""
    return msgspec.json.format(msgspec.json.encode(plan), indent=2) + b"\n"


def load(path: Path) -> SavedPlan:
    """Read a saved plan file."""
    try:
        return msgspec.json.decode(path.read_bytes(), type=SavedPlan)
    except FileNotFoundError:
        raise PlanFileError(f"plan file {path} does not exist") from None
    except UNREADABLE as exc:
        raise PlanFileError(f"{path} is not a saved plan ({exc}); write one with "
                            "`plancast plan save RUN_ID -o FILE`") from None


def parameters(plan: SavedPlan) -> set[str]:
    """The names of the ``{{name}}`` parameters the plan uses."""
    return set(PARAMETER.findall(msgspec.json.encode(plan).decode()))


def fill(plan: SavedPlan, params: Mapping[str, str]) -> SavedPlan:
    """The plan with every ``{{name}}`` replaced by ``params[name]`` (as text)."""
    needed = parameters(plan)
    missing, unused = needed - params.keys(), params.keys() - needed
    if missing:
        raise PlanFileError("the plan needs " + ", ".join(
            f"--param {name}=VALUE" for name in sorted(missing)))
    if unused:
        raise PlanFileError(f"the plan has no parameter {', '.join(sorted(unused))}; its "
                            f"parameters: {', '.join(sorted(needed)) or 'none'}")

    def substitute(value: Any) -> Any:
        if isinstance(value, str):
            return PARAMETER.sub(lambda m: params[m.group(1)], value)
        if isinstance(value, list):
            return [substitute(v) for v in value]
        if isinstance(value, dict):
            return {k: substitute(v) for k, v in value.items()}
        return value

    raw = substitute(msgspec.to_builtins(plan))
    try:
        return msgspec.convert(raw, SavedPlan)
    except msgspec.ValidationError as exc:
        raise PlanFileError(f"the plan is not valid once filled in: {exc}") from None


def parse_params(pairs: list[str]) -> dict[str, str]:
    """``["service=auth", ...]`` as a mapping; an entry without ``=``, or a name given twice
    (which value was meant?), is a usage error."""
    params: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not PARAMETER.fullmatch("{{" + name + "}}"):
            raise PlanFileError(f"--param {pair!r}: write NAME=VALUE (NAME a plain word)")
        if name in params:
            raise PlanFileError(f"--param {name} is given twice ({params[name]!r} and "
                                f"{value!r}): give each parameter once")
        params[name] = value
    return params


def check_plan(steps: list[Step], team: TeamConfig, known_tools: Collection[str], *,
               max_steps: int) -> None:
    """Raise PlanValidationError unless the steps are a plan this team can run: known roles,
    tools each role may use, dependencies on steps of the plan, no cycle."""
    scheduler = Scheduler(known_roles=[r.name for r in team.executors()],
                          known_tools=known_tools, max_steps=max_steps)
    for step in steps:
        check_tool_allowed(team, step, known_tools)
        scheduler.add(step)
    scheduler.close_plan()


def check_tool_allowed(team: TeamConfig, step: Step, known_tools: Collection[str]) -> None:
    """A tool step's role must have its tool (an unknown tool is the scheduler's to name)."""
    role = team.roles.get(step.role)
    if step.tool is None or step.tool not in known_tools or role is None:
        return
    if step.tool not in role.tools:
        raise PlanValidationError(
            f"step {step.id}: role {step.role!r} may not use tool {step.tool!r}; "
            f"its tools are: {', '.join(role.tools) or 'none'}. Assign the step to a role "
            "that has the tool.", step_id=step.id)


NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""A stored plan's name (a key of the deployment's plans bucket)."""


async def _plans(bus: Bus) -> Any:
    try:
        return await bus.js.key_value(plans_bucket(bus.prefix))
    except BucketNotFoundError:
        raise PlanFileError(f"this deployment ({bus.server_url}, prefix {bus.prefix!r}) has no "
                            "plans bucket yet: run `plancast provision` with the admin's "
                            "credentials") from None


def _checked(name: str) -> str:
    if not NAME.fullmatch(name):
        raise PlanFileError(f"plan name {name!r}: use 1 to 64 letters, digits, '-' or '_'")
    return name


async def store_plan(bus: Bus, name: str, plan: SavedPlan) -> None:
    """Keep ``plan`` in the deployment under ``name`` (a newer one replaces it)."""
    kv = await _plans(bus)
    await kv.put(_checked(name), dump(plan))


async def stored_plan(bus: Bus, name: str) -> SavedPlan:
    """The plan stored under ``name``."""
    kv = await _plans(bus)
    try:
        entry = await kv.get(_checked(name))
    except KeyNotFoundError:
        raise PlanFileError(f"no plan named {name!r} in this deployment: list them with "
                            "`plancast plan list`") from None
    try:
        return msgspec.json.decode(entry.value or b"", type=SavedPlan)
    except UNREADABLE as exc:
        raise PlanFileError(f"the plan stored as {name!r} does not decode ({exc}); save it "
                            "again") from None


async def stored_plans(bus: Bus) -> dict[str, SavedPlan]:
    """Every plan stored in the deployment, by name (one that does not decode is left out)."""
    kv = await _plans(bus)
    found: dict[str, SavedPlan] = {}
    for name, entry in sorted((await current_values(kv, ">")).items()):
        with contextlib.suppress(*UNREADABLE):
            found[name] = msgspec.json.decode(entry.value, type=SavedPlan)
    return found
