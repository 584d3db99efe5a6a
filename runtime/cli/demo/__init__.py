"""The demo's team and scripted-model scenario, shipped with the package."""

from __future__ import annotations

import tomllib
from importlib.resources import files
from typing import Any

from ...config import TeamConfig, team_from_dict

__all__ = ("DEMO_GOAL", "demo_scenario_path", "demo_team")

DEMO_GOAL = "Compare the populations of France and Germany."


def demo_scenario_path() -> Any:
    return files(__name__) / "scenario.toml"


def demo_team(base_url: str) -> TeamConfig:
    """The demo team with every model pointed at the scripted server."""
    data = tomllib.loads((files(__name__) / "team.toml").read_text())
    for preset in data.get("models", {}).values():
        preset["base_url"] = base_url
    return team_from_dict(data, source="demo team")
