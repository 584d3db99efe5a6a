"""Reading a team file: model presets resolved, roles named, every mistake one line that
names the file; apart from the team's types so the whole-team checks (sub-teams) can use
them without a circle."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .errors import TeamConfigError
from .subteams import team_problems
from .team import TeamConfig


def team_from_dict(data: dict[str, Any], *, source: str = "team config") -> TeamConfig:
    """Resolve model presets and role names, then validate."""
    data = dict(data)
    presets = data.pop("models", {})
    roles: dict[str, Any] = {}
    for name, raw in (data.pop("roles", None) or {}).items():
        role = dict(raw)
        role.setdefault("name", name)
        model = role.get("model")
        if isinstance(model, str):
            if model not in presets:
                raise TeamConfigError(
                    f"{source}: role {name!r} uses model preset {model!r}, but there is no "
                    f"[models.{model}] table (presets: {', '.join(sorted(presets)) or 'none'})"
                )
            preset = presets[model]
            role["model"] = {"name": model, **preset} if isinstance(preset, dict) else preset
        roles[name] = role
    if not roles:
        raise TeamConfigError(f"{source}: no roles; add at least a [roles.<name>] table")
    try:
        team = TeamConfig(roles=roles, **data)
    except ValidationError as exc:  # one line per mistake, without pydantic's decoration
        lines = []
        for error in exc.errors():
            where = ".".join(str(part) for part in error["loc"])
            lines.append(f"{source}: {where + ': ' if where else ''}"
                         f"{error['msg'].removeprefix('Value error, ')}")
        raise TeamConfigError("\n".join(lines)) from exc
    if problems := team_problems(team):
        raise TeamConfigError("\n".join(f"{source}: {p}" for p in problems))
    return team


def load_team(path: Path) -> TeamConfig:
    """Read a team TOML file."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise TeamConfigError(f"team file {path} does not exist; pass --team FILE") from None
    except tomllib.TOMLDecodeError as exc:
        raise TeamConfigError(f"{path} is not valid TOML: {exc}") from exc
    return team_from_dict(data, source=str(path))
