"""A role's ``options`` are checked against what its kind declares, before anything starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime.actor import discover_roles
from runtime.config import (
    RoleConfig,
    RoleOption,
    Settings,
    TeamConfig,
    TeamConfigError,
    option_problems,
    team_from_dict,
)
from runtime.tools import builtin_tools
from runtime.worker import open_deployment, preflight_problems

from ..subprocesses import clean_env, plancast


def team(**options: dict[str, Any]) -> TeamConfig:
    roles: dict[str, Any] = {
        "planner": {"kind": "planner", "model": "m"},
        "critic": {"kind": "critic", "model": "m"},
        "synthesizer": {"kind": "synthesizer", "model": "m"},
        "worker": {"tools": ["echo"], "tool_steps_only": True},
    }
    for name, opts in options.items():
        roles[name]["options"] = opts
    return team_from_dict({"models": {"m": {"model": "x", "base_url": "http://127.0.0.1:9/v1"}},
                           "roles": roles})


def test_the_planners_stream_plan_is_valid() -> None:
    assert preflight_problems(team(planner={"stream_plan": False}), builtin_tools()) == []


def test_an_unknown_option_lists_the_valid_ones() -> None:
    (problem,) = preflight_problems(team(planner={"stream_plans": False}), builtin_tools())
    assert "role 'planner' (kind 'planner'): unknown option 'stream_plans'" in problem
    assert "its options: stream_plan (bool, default true:" in problem


def test_the_old_structured_output_option_says_what_replaced_it() -> None:
    problems = preflight_problems(
        team(critic={"structured_output": True}, synthesizer={"structured_output": True}),
        builtin_tools())
    assert len(problems) == 2
    assert all("unknown option 'structured_output'" in p and "structured = " in p
               and "its options: none" in p for p in problems)


def test_an_option_of_the_wrong_type_is_refused() -> None:
    (problem,) = preflight_problems(team(planner={"stream_plan": "no"}), builtin_tools())
    assert "option 'stream_plan' must be a bool, not 'no'" in problem


def test_a_number_below_its_minimum_is_refused() -> None:
    (problem,) = preflight_problems(team(planner={"plan_text_chars": 0}), builtin_tools())
    assert "option 'plan_text_chars' must be at least 1, not 0" in problem
    assert preflight_problems(team(planner={"plan_text_chars": 200}), builtin_tools()) == []


def test_a_kind_that_declares_nothing_takes_any_option() -> None:
    def factory(ctx: object) -> None:  # a third-party role factory without declarations
        raise AssertionError("not called")

    role = RoleConfig(name="mine", kind="mine", options={"anything": 1})
    assert option_problems(role, factory) == []
    factory.role_options = {"size": RoleOption(int, 1, "how big")}  # type: ignore[attr-defined]
    assert option_problems(role, factory) == [
        "role 'mine' (kind 'mine'): unknown option 'anything'; its options: size (int, "
        "default 1: how big)"]


def test_every_builtin_kind_declares_its_options() -> None:
    roles = discover_roles()
    for kind in ("planner", "executor", "critic", "synthesizer", "supervisor"):
        assert roles[kind].factory.role_options is not None, kind


@pytest.mark.anyio
async def test_building_the_team_refuses_bad_options(nats_url: str, prefix: str) -> None:
    """Code that skips the preflight (open_deployment) is stopped too, before any actor runs."""
    bad = team(critic={"structured_output": True})
    with pytest.raises(TeamConfigError, match="unknown option 'structured_output'"):
        async with open_deployment(Settings(nats_url=nats_url, prefix=prefix), bad,
                                   builtin_tools(plugins=False)):
            pass


@pytest.mark.anyio
async def test_plancast_run_reports_bad_options_in_one_line(tmp_path: Path) -> None:
    team_file = tmp_path / "team.toml"
    team_file.write_text(
        '[models.m]\nmodel = "x"\nbase_url = "http://127.0.0.1:9/v1"\n'
        '[roles.planner]\nkind = "planner"\nmodel = "m"\noptions = { stream_plam = false }\n'
        '[roles.synthesizer]\nkind = "synthesizer"\nmodel = "m"\n')
    result = await plancast("run", "--team", str(team_file), "goal", cwd=tmp_path,
                            env=clean_env(PLANCAST_DATA_DIR=str(tmp_path)))
    assert result.returncode == 2
    err = result.stderr.decode()
    assert "unknown option 'stream_plam'" in err and "stream_plan (bool" in err
    assert "Traceback" not in err
