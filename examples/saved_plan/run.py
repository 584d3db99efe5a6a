"""Run a saved plan with parameters: no planner model call, the same steps every time.

    python examples/saved_plan/run.py service=auth replicas=3 rps_per_replica=250

``capacity.json`` is a plan as ``plancast plan save RUN_ID -o FILE`` writes it, with
``{{service}}``, ``{{replicas}}`` and ``{{rps_per_replica}}`` put in by hand. The CLI does
the same with ``plancast run --plan capacity.json --param service=auth ...``. The
synthesizer is a scripted model; the planner's model is never asked.

With ``NATS_URL`` unset an embedded nats-server is started in a temporary directory.
Prints each step's output and exits 0 when the run finished, 1 when it failed.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import anyio

from protocols import RunFinished, RunRequest, StepFinished
from runtime import Settings, builtin_tools, follow, open_deployment, submit, team_from_dict
from runtime.client import PlanFileError, fill, load, parse_params
from runtime.testing import Rule, Scenario, open_scripted_model_server

HERE = Path(__file__).parent
TEAM = {
    "models": {"scripted": {"model": "scripted-model"}},
    "roles": {
        "planner": {"kind": "planner", "model": "scripted"},
        "calc": {"description": "runs tools", "tools": ["math", "echo"], "tool_steps_only": True},
        "synthesizer": {"kind": "synthesizer", "model": "scripted"},
    },
}
ANSWER = '{"action": "finish", "answer": "see the report step"}'


async def main(params: list[str]) -> int:
    try:
        plan = fill(load(HERE / "capacity.json"), parse_params(params))
    except PlanFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    scenario = Scenario(rules=[Rule(role="synthesizer", text=ANSWER)])
    with tempfile.TemporaryDirectory(prefix="plancast-plan-") as tmp:
        async with open_scripted_model_server(scenario) as model:
            TEAM["models"]["scripted"]["base_url"] = model.base_url
            settings = Settings(data_dir=Path(tmp))  # NATS_URL, if set, is used instead
            async with open_deployment(settings, team_from_dict(TEAM),
                                       builtin_tools(plugins=False)) as bus:
                accepted = await submit(bus, RunRequest(goal=plan.goal, plan=plan.steps))
                async for event in follow(bus, accepted.run_id):
                    if isinstance(event, StepFinished):
                        print(f"step {event.step_id}: {event.output}")
                    elif isinstance(event, RunFinished):
                        return 0
    return 1


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[1:]))
