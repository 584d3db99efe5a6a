"""A tool-using plan with a reviewed program and a wide fan-out, on the scripted model.

    python examples/fanout/run.py [--json] [--time-scale 0.5]

The team (``team.toml``) and what its model answers (``scenario.toml``) sit next to this
file. The plan has 16 steps: a coder writes a program that the critic *runs* before it
counts (its first version does not run, so the step is redone with the critique),
twelve ``math`` steps run side by side, and three ``python`` steps join them. Steps are
dispatched while the plan is still streaming, each as soon as its inputs are done.

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
    CriticVerdict,
    RunEvent,
    RunFailed,
    RunFinished,
    RunRequest,
    StepDispatched,
    StepFailed,
    StepFinished,
    encode,
)
from runtime import Settings, builtin_tools, follow, open_deployment, submit, team_from_dict
from runtime.testing import load_scenario, open_scripted_model_server

HERE = Path(__file__).parent
GOAL = "Add up the squares of 1 to 12, and check the sum with a closed-formula program."


def show(event: RunEvent) -> str | None:
    match event:
        case StepDispatched(step_id=sid, role=role, attempt=attempt):
            again = f" (attempt {attempt})" if attempt > 1 else ""
            return f"step {sid:2} -> {role}{again}"
        case StepFinished(step_id=sid, output=output):
            return f"step {sid:2} done: {output.strip().splitlines()[-1][:60]}"
        case StepFailed(step_id=sid, error=error):
            return f"step {sid:2} failed: {error[:70]}"
        case CriticVerdict(step_id=sid, approved=approved, critique=critique):
            verdict = "approved" if approved else "REJECTED"
            return f"critic {verdict} step {sid}: {critique.splitlines()[0][:70]}"
    return None


async def main(as_json: bool, time_scale: float) -> int:
    team = tomllib.loads((HERE / "team.toml").read_text())
    scenario = load_scenario(HERE / "scenario.toml")
    async with open_scripted_model_server(scenario, time_scale=time_scale) as model:
        team["models"]["scripted"]["base_url"] = model.base_url
        with tempfile.TemporaryDirectory(prefix="plancast-fanout-") as data:
            settings = Settings(data_dir=Path(data))  # NATS_URL, if set, wins
            async with open_deployment(settings, team_from_dict(team, source="team.toml"),
                                       builtin_tools()) as bus:
                accepted = await submit(bus, RunRequest(goal=GOAL))
                async for event in follow(bus, accepted.run_id):
                    line = encode(event).decode() if as_json else show(event)
                    if line:
                        print(line, flush=True)
                    if isinstance(event, RunFinished | RunFailed):
                        if not as_json:
                            outcome = (event.answer if isinstance(event, RunFinished)
                                       else f"failed: {event.reason}")
                            print(f"\n{outcome}\n(every model answer came from a scripted "
                                  "model)")
                        return 0 if isinstance(event, RunFinished) else 1
    return 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="plancast fan-out example (scripted model)")
    parser.add_argument("--json", action="store_true", help="print the events as NDJSON")
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="multiply the scripted latencies")
    args = parser.parse_args()
    try:
        code = anyio.run(main, args.json, args.time_scale)
    except* BrokenPipeError:  # `run.py | head`: the reader has gone, so end quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        code = 0
    sys.exit(code)
