"""Roles are found through the ``plancast.roles`` entry-point group, built-ins included.

A third-party package adds a role by declaring, in its own ``pyproject.toml``::

    [project.entry-points."plancast.roles"]
    reviewer = "my_pkg.reviewer:ReviewerRole"

A role whose import fails is reported and skipped: one broken plugin never takes a
worker down.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

log = logging.getLogger(__name__)

ROLE_GROUP = "plancast.roles"


@dataclass(frozen=True)
class RoleEntry:
    """One entry point in the role group, loaded or not."""

    name: str
    target: str
    """``module:attribute`` the entry point names."""
    package: str
    version: str
    factory: Any = None
    """The loaded object (a role factory), None when loading failed."""
    error: str = ""
    """Why loading failed: the exception, for ``plancast roles`` and the logs."""

    @property
    def ok(self) -> bool:
        return self.factory is not None


def _load(ep: EntryPoint) -> RoleEntry:
    dist = ep.dist
    package, version = (dist.name, dist.version) if dist is not None else ("?", "?")
    try:
        factory = ep.load()
    except Exception as exc:
        log.warning("role %r from %s %s could not be loaded and is skipped: %s: %s",
                    ep.name, package, version, type(exc).__name__, exc)
        return RoleEntry(ep.name, ep.value, package, version,
                         error=f"{type(exc).__name__}: {exc}")
    return RoleEntry(ep.name, ep.value, package, version, factory=factory)


def discover_roles() -> dict[str, RoleEntry]:
    """Every role in the entry-point group, by name; failed ones carry their error."""
    found: dict[str, RoleEntry] = {}
    for ep in entry_points(group=ROLE_GROUP):
        if ep.name in found:
            log.warning("role %r is declared twice (%s and %s); using the first",
                        ep.name, found[ep.name].target, ep.value)
            continue
        found[ep.name] = _load(ep)
    return found
