"""What a role factory receives, and the base class of actors built from a role config."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import ClassVar

import anyio
from anyio.abc import TaskStatus

from ..bus import Bus
from ..config import (
    RoleConfig,
    RoleOption,
    TeamConfig,
    TeamConfigError,
    default_max_tokens,
    option_problems,
)
from ..errors import PlancastError
from ..models import ModelClient
from ..tools import ToolRegistry
from .base import Actor
from .errors import UnknownRole
from .registry import discover_roles


@dataclass(frozen=True)
class RoleContext:
    """Everything a role factory needs: ``factory(ctx) -> Actor``."""

    bus: Bus
    role: RoleConfig
    team: TeamConfig
    tools: ToolRegistry
    """Every tool of the deployment; a role uses the subset its config allows."""


RoleFactory = Callable[[RoleContext], Actor]


class RoleActor(Actor):
    """An actor built from a role config, with its model client open while it serves.

    A subclass lists the ``options`` it reads in ``role_options``; the team's options are
    checked against it before the actor is built (None: it reads none of its own, and
    takes any)."""

    role_options: ClassVar[Mapping[str, RoleOption] | None] = None

    def __init__(
        self, ctx: RoleContext, *, instance: str | None = None, concurrency: int | None = None
    ) -> None:
        super().__init__(ctx.bus, role=ctx.role.name, instance=instance,
                         concurrency=concurrency or ctx.role.concurrency)
        self.ctx = ctx
        self.config = ctx.role
        self.tools = ctx.tools.subset(t for t in ctx.role.tools if t in ctx.tools)
        self._model: ModelClient | None = None

    def offered_tools(self) -> list[str]:
        return self.tools.names()

    @property
    def model(self) -> ModelClient:
        if self._model is None:
            raise PlancastError(
                f"role {self.name!r} has no model configured; add one under [roles.{self.name}]"
            )
        return self._model

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with AsyncExitStack() as stack:
            if self.config.model is not None:
                self._model = await stack.enter_async_context(
                    ModelClient(self.config.model, role=self.name,
                                default_max_tokens=default_max_tokens(self.config.kind))
                )
            await super().serve(task_status=task_status)


def build_actor(ctx: RoleContext) -> Actor:
    """Build the actor for ``ctx.role`` through the entry point named by its kind."""
    entries = discover_roles()
    entry = entries.get(ctx.role.kind)
    if entry is None or not entry.ok:
        known = ", ".join(sorted(name for name, e in entries.items() if e.ok))
        why = f" (it failed to load: {entry.error})" if entry is not None else ""
        raise UnknownRole(
            f"role {ctx.role.name!r} has kind {ctx.role.kind!r}, which is not an installed "
            f"plancast role{why}; installed: {known}"
        )
    problems = option_problems(ctx.role, entry.factory)
    if problems:
        raise TeamConfigError("\n".join(problems))
    actor: Actor = entry.factory(ctx)
    return actor


def build_team_actors(
    bus: Bus, team: TeamConfig, tools: ToolRegistry, names: list[str] | None = None,
) -> list[Actor]:
    """Actors for the named roles (every configured role when None)."""
    return [build_actor(RoleContext(bus, team.role(n), team, tools)) for n in names or team.roles]
