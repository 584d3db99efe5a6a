"""The ``options`` a role kind takes under ``[roles.NAME]``, declared by the kind and checked
at start-up.

A kind declares its options as a class attribute ``role_options`` (name -> :class:`RoleOption`);
an option the kind does not declare, or of the wrong type, is a start-up error that lists the
valid ones. A kind that declares nothing (``None``, e.g. a third-party factory function)
accepts any option and reads what it knows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .team import RoleConfig

__all__ = ["RoleOption", "declared_options", "option_problems"]

_REPLACED = {
    "structured_output": "it was replaced by `structured = \"json_schema\"` (or another "
                         "dialect) under the role's [models.NAME]",
}
"""Options that existed once, with what replaced them."""


@dataclass(frozen=True)
class RoleOption:
    """One option a role kind takes."""

    type: type
    """What its value must be (``bool``, ``int``, ``str`` ...)."""
    default: Any
    """Its value when the team file does not set it."""
    doc: str
    """What it does, one line."""
    minimum: int | None = None
    """The smallest value a number may have."""

    def describe(self, name: str) -> str:
        default = str(self.default).lower() if isinstance(self.default, bool) else self.default
        return f"{name} ({self.type.__name__}, default {default}: {self.doc})"


def declared_options(factory: Any) -> Mapping[str, RoleOption] | None:
    """The options a kind's factory declares; None when it declares nothing."""
    declared = getattr(factory, "role_options", None)
    return declared if isinstance(declared, Mapping) else None


def option_problems(role: RoleConfig, factory: Any) -> list[str]:
    """What is wrong with the role's options for its kind, one line each."""
    declared = declared_options(factory)
    if declared is None:
        return []
    valid = "; ".join(o.describe(n) for n, o in declared.items()) or "none"
    found = []
    for name, value in role.options.items():
        where = f"role {role.name!r} (kind {role.kind!r})"
        option = declared.get(name)
        if option is None:
            why = f" ({_REPLACED[name]})" if name in _REPLACED else ""
            found.append(f"{where}: unknown option {name!r}{why}; its options: {valid}")
        elif not _fits(value, option.type):
            found.append(f"{where}: option {name!r} must be a {option.type.__name__}, not "
                         f"{value!r}; {option.describe(name)}")
        elif option.minimum is not None and value < option.minimum:
            found.append(f"{where}: option {name!r} must be at least {option.minimum}, not "
                         f"{value!r}")
    return found


def _fits(value: Any, kind: type) -> bool:
    if kind is not bool and isinstance(value, bool):
        return False  # TOML's true is no number
    if kind is float:
        return isinstance(value, int | float)
    return isinstance(value, kind)
