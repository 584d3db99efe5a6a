"""What a planner lends each run it drives: one value, so a run never reaches its planner.

The planner builds it once and hands the same value to every run it takes on. Everything
in it is the planner's and outlives the run: the bus, the team, the tools, the planner's
own role config and model, the keys of its nonces, what it hears of the other actors, and
who it is (name, instance, owner id) with how long its leases last. (Where a run's state
is written, its ``RunStore``, is the run's own: the planner hands it over beside this.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from runtime.bus import Bus
from runtime.config import RoleConfig, TeamConfig
from runtime.models import ModelClient
from runtime.nonces import Nonces
from runtime.tools import ToolRegistry

from ..liveness import Liveness


@dataclass(frozen=True, slots=True)
class RunEnv:
    """The planner's side of a run: shared by all its runs, never changed by one."""

    bus: Bus
    team: TeamConfig
    tools: ToolRegistry
    """Every tool of the deployment (a plan may name one only the workers have)."""
    config: RoleConfig
    """The planner's role: its options and system prompt."""
    model_client: Callable[[], ModelClient]
    """The planner's model client, opened while the planner serves (``model``)."""
    nonces: Nonces
    liveness: Liveness
    name: str
    """The planner's role name: it sends as this role (errors, child-run cancels)."""
    instance: str
    owner_id: str
    """``name/instance``: who owns the runs it drives (headers, fences, events)."""
    lease: float
    """Seconds a run's lease lasts after each save."""

    @property
    def model(self) -> ModelClient:
        """The planner's model; raises ``PlancastError`` if its role has none."""
        return self.model_client()

    @property
    def known_tools(self) -> set[str]:
        """Tools a plan may name: the team's (they may live on the workers only) and ours."""
        return self.team.tool_names() | set(self.tools.names())

    def object_limit_of(self, role: str) -> int | None:
        """Most bytes ``role`` may send by reference (None: the deployment's limit)."""
        config = self.team.roles.get(role)
        return config.max_object_bytes if config is not None else None
