"""``effects = "once"`` in the team file, and the idempotency key's wire field: each mistake
one line, and tasks of planners before the key still decode (and still get a key)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from protocols import StepResult, StepTask, decode
from runtime.config import TeamConfigError, team_from_dict
from runtime.nonces import Nonces
from runtime.tools import attempt_key

from ..subprocesses import clean_env, plancast


def team(worker: dict[str, Any] | None = None, **extra: Any) -> Any:
    return team_from_dict({
        "models": {"m": {"model": "x", "base_url": "http://127.0.0.1:9/v1"}},
        "roles": {"planner": {"kind": "planner", "model": "m"},
                  "synthesizer": {"kind": "synthesizer", "model": "m"},
                  "worker": {"tools": ["echo", "http_get"], "tool_steps_only": True,
                             **(worker or {})}},
        **extra}, source="team.toml")


def test_effects_once_on_a_role_or_a_tool() -> None:
    assert not team().effects_once("worker", ["echo"])  # the default is unchanged
    assert team({"effects": "once"}).effects_once("worker", [])
    by_tool = team(tools={"echo": {"effects": "once"}})
    assert by_tool.effects_once("worker", ["http_get", "echo"])
    assert not by_tool.effects_once("worker", ["http_get"])


def test_effects_none_on_a_tool_unless_its_role_says_once() -> None:
    """A tool that only computes its output: its tool steps keep no record of finished
    attempts. A role that says ``once`` keeps them for every step."""
    assert not team().effects_none("worker", "echo")  # the default is unchanged
    pure = {"tools": {"echo": {"effects": "none"}}}
    assert team(**pure).effects_none("worker", "echo")
    assert not team(**pure).effects_none("worker", "http_get")
    assert not team({"effects": "once"}, **pure).effects_none("worker", "echo")


@pytest.mark.parametrize(("worker", "extra", "says"), [
    ({"effects": "twice"}, {}, "team.toml: roles.worker.effects: Input should be 'default' "
                               "or 'once'"),
    ({}, {"tools": {"echo": {"effects": "never"}}},
     "team.toml: tools.echo.effects: Input should be 'default', 'once' or 'none'"),
    ({}, {"tools": {"echo": {"effect": "once"}}}, "team.toml: tools.echo.effect: Extra inputs"),
    ({}, {"tools": {"mail": {"effects": "once"}}},
     "team.toml: [tools.mail] names a tool no executor role lists in its tools"),
])
def test_a_wrong_effects_setting_is_one_line(worker: dict[str, Any], extra: dict[str, Any],
                                            says: str) -> None:
    with pytest.raises(TeamConfigError) as error:
        team(worker, **extra)
    message = str(error.value)
    assert "\n" not in message and message.startswith(says), message


@pytest.mark.anyio
async def test_plancast_reports_a_wrong_effects_setting_in_one_line(tmp_path: Path) -> None:
    team_file = tmp_path / "team.toml"
    team_file.write_text(
        '[models.m]\nmodel = "x"\nbase_url = "http://127.0.0.1:9/v1"\n'
        '[roles.planner]\nkind = "planner"\nmodel = "m"\n'
        '[roles.worker]\ntools = ["echo"]\ntool_steps_only = true\neffects = "twice"\n'
        '[roles.synthesizer]\nkind = "synthesizer"\nmodel = "m"\n')
    result = await plancast("run", "--team", str(team_file), "goal", cwd=tmp_path,
                            env=clean_env(PLANCAST_DATA_DIR=str(tmp_path)))
    assert result.returncode == 2
    err = result.stderr.decode().strip()
    assert "roles.worker.effects: Input should be 'default' or 'once'" in err, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err


def test_a_task_of_a_planner_before_the_key_decodes_and_gets_a_key_from_its_nonce() -> None:
    old = (b'{"type":"step.task","schema_version":1,"run_id":"r1","goal":"g",'
           b'"step":{"id":3,"role":"worker","tool":"echo","args":{"text":"x"}},'
           b'"attempt":2,"nonce":"secret-nonce"}')
    task = decode(old, StepTask)
    assert (task.idempotency_key, task.effects, task.check_keys) == ("", "", [])
    key = attempt_key(task.run_id, task.step.id, task.attempt, task.nonce)
    assert key == attempt_key("r1", 3, 2, "secret-nonce") != attempt_key("r1", 3, 3,
                                                                         "secret-nonce")
    assert "secret-nonce" not in key and key.startswith("pc-")
    result = decode(b'{"type":"step.result","run_id":"r1","step_id":1,"attempt":1,'
                    b'"ok":false}', StepResult)
    assert result.cause == ""


def test_the_key_is_the_planners_per_attempt_and_not_the_nonce() -> None:
    planners, other = Nonces("shared secret"), Nonces("another secret")
    key = planners.idempotency("run-1", 4, 1)
    assert key == Nonces("shared secret").idempotency("run-1", 4, 1)  # any planner
    assert key != planners.idempotency("run-1", 4, 2)  # a new attempt, a new action
    assert key != other.idempotency("run-1", 4, 1)  # nobody without the secret
    assert planners.task("run-1", 4, 1) not in key
