"""A manager delegates to two sub-teams, each a child run with its own planner brief,
executors and replan budget, on the scripted model.

    python examples/hierarchy/run.py [--json]

The team (``team.toml``) and what its model answers (``scenario.toml``) sit next to this
file. The manager plans two large steps, one per sub-team (``kind = "team"`` roles). Each
step starts a child run whose plan may use only that team's members; its answer is the
step's output. One research step fails, so the research desk replans by itself while the
manager waits; the manager never replans. The tree is followed from the root run
(``runtime.client.follow_tree``), each child's events indented under its parent's.

With ``NATS_URL`` unset an embedded nats-server is started in a temporary directory.
Exits 0 when the run finished, 1 when it failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import tomllib
from pathlib import Path

import anyio

from protocols import (
    ReplanStarted,
    RunEvent,
    RunFailed,
    RunFinished,
    RunRequest,
    RunStarted,
    StepFailed,
    StepFinished,
    StepStarted,
    encode,
)
from runtime import Settings, builtin_tools, open_deployment, submit, team_from_dict
from runtime.client import follow_tree
from runtime.testing import load_scenario, open_scripted_model_server

HERE = Path(__file__).parent
GOAL = "How many hours has a leap year? Answer in a sentence."


def show(event: RunEvent) -> str | None:
    match event:
        case RunStarted(parent=parent) if parent is not None:
            return f"run {event.run_id} started for step {parent.step_id} ({parent.role})"
        case StepStarted(step_id=sid, child_run=child) if child:
            return f"step {sid} -> sub-team run {child}"
        case StepFinished(step_id=sid, output=output):
            return f"step {sid} done: {output}"
        case StepFailed(step_id=sid, error=error, will_retry=again):
            return f"step {sid} failed{' (retrying)' if again else ''}: {error[:60]}"
        case ReplanStarted(round=round_, source=source):
            return f"replan {round_} ({source})"
        case RunFinished(answer=answer, usage=usage):
            return f"finished: {answer} [{usage.calls} model calls]"
        case RunFailed(reason=reason):
            return f"failed: {reason}"
    return None


async def main(as_json: bool) -> int:
    team = tomllib.loads((HERE / "team.toml").read_text())
    scenario = load_scenario(HERE / "scenario.toml")
    depth: dict[str, int] = {}
    outcome: list[RunEvent] = []

    async def print_event(run_id: str, event: RunEvent) -> None:
        if isinstance(event, RunStarted):
            depth[run_id] = event.parent.depth if event.parent is not None else 0
        if run_id == root and isinstance(event, RunFinished | RunFailed):
            outcome.append(event)
        line = encode(event).decode() if as_json else show(event)
        if line:
            print(("" if as_json else "    " * depth.get(run_id, 0)) + line, flush=True)

    async with open_scripted_model_server(scenario) as model:
        team["models"]["scripted"]["base_url"] = model.base_url
        with tempfile.TemporaryDirectory(prefix="plancast-hierarchy-") as data:
            settings = Settings(data_dir=Path(data))  # NATS_URL, if set, wins
            async with open_deployment(settings, team_from_dict(team, source="team.toml"),
                                       builtin_tools()) as bus:
                root = (await submit(bus, RunRequest(goal=GOAL))).run_id
                with anyio.fail_after(120):
                    await follow_tree(bus, root, print_event)
    if not as_json:
        print("(every model answer came from a scripted model)")
    return 0 if outcome and isinstance(outcome[0], RunFinished) else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print every event as NDJSON")
    as_json = parser.parse_args().json
    try:
        code = anyio.run(main, as_json)
    except* BrokenPipeError:  # `run.py | head`: the reader has gone, so end quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        code = 0
    sys.exit(code)
