"""A plan held for approval, edited by its reviewer, then run: plan review in code.

    python examples/plan_review/run.py [--reject]

The run asks for review (``review_plan="human"``); the planner (a scripted model) writes a
plan that deploys to ``production``, and nothing runs. This script plays the reviewer, as
``plancast plan show`` / ``plancast plan approve --edit`` would: it reads the plan
awaiting approval, changes the target to ``staging`` and approves the edit. With
``--reject`` it rejects the first plan instead, and the planner's model writes a new one
from the reason.

With ``NATS_URL`` unset an embedded nats-server is started in a temporary directory.
Prints the plan, the decision and each step's output; exits 0 when the run finished.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import anyio
import msgspec

from protocols import PlanApproved, PlanAwaitingApproval, RunFinished, RunRequest, StepFinished
from runtime import Bus, Settings, builtin_tools, follow, open_deployment, submit, team_from_dict
from runtime.client import decide_plan
from runtime.testing import Rule, Scenario, open_scripted_model_server

TEAM = {
    "models": {"scripted": {"model": "scripted-model"}},
    "roles": {
        "planner": {"kind": "planner", "model": "scripted"},
        "ops": {"description": "runs tools", "tools": ["echo"], "tool_steps_only": True},
        "synthesizer": {"kind": "synthesizer", "model": "scripted"},
    },
}


def step(id: int, text: str, *after: int) -> str:
    return json.dumps({"id": id, "role": "ops", "tool": "echo", "args": {"text": text},
                       "depends_on": list(after)})


RULES = [
    Rule(role="planner", contains="never production", lines=[step(1, "build"),
                                                              step(2, "deploy $1 to canary", 1)]),
    Rule(role="planner", lines=[step(1, "build"), step(2, "deploy $1 to production", 1)]),
    Rule(role="synthesizer", text='{"action": "finish", "answer": "deployed"}'),
]


async def main(reject: bool) -> int:
    with tempfile.TemporaryDirectory(prefix="plancast-review-") as tmp:
        async with open_scripted_model_server(Scenario(rules=RULES)) as model:
            TEAM["models"]["scripted"]["base_url"] = model.base_url  # type: ignore[index]
            settings = Settings(data_dir=Path(tmp))  # NATS_URL, if set, is used instead
            async with open_deployment(settings, team_from_dict(TEAM),
                                       builtin_tools(plugins=False)) as bus:
                run = await submit(bus, RunRequest(goal="ship it", review_plan="human"))
                async for event in follow(bus, run.run_id):
                    if isinstance(event, PlanAwaitingApproval):
                        for s in event.steps:
                            print(f"proposed {s.id}: {s.args['text']}")
                        await _decide(bus, run.run_id, event, reject)
                        reject = False  # review the second plan as any other
                    elif isinstance(event, PlanApproved):
                        print(f"approved by {event.by}" + (f" ({event.changes})"
                                                           if event.edited else ""))
                    elif isinstance(event, StepFinished):
                        print(f"step {event.step_id}: {event.output}")
                    elif isinstance(event, RunFinished):
                        return 0
    return 1


async def _decide(bus: Bus, run_id: str, plan: PlanAwaitingApproval, reject: bool) -> None:
    if reject:
        print("rejected: never production")
        await decide_plan(bus, run_id, approved=False, by="reviewer",
                          reason="never production; deploy to canary first")
        return
    edited = [msgspec.structs.replace(s, args={"text": s.args["text"].replace(
        "production", "staging")}) for s in plan.steps]
    await decide_plan(bus, run_id, approved=True, steps=edited, by="reviewer")


if __name__ == "__main__":
    sys.exit(anyio.run(main, "--reject" in sys.argv[1:]))
