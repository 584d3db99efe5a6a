"""Actors: the base class with typed handlers, the roles built from a team file, the tasks
handlers run in, what an actor reports when it cannot handle a message, and the registry
that finds roles through entry points."""

from .base import Actor as Actor
from .base import Source as Source
from .base import Subscription as Subscription
from .base import WorkQueue as WorkQueue
from .base import on as on
from .errors import UnknownRole as UnknownRole
from .handlers import HandlerTasks as HandlerTasks
from .registry import RoleEntry as RoleEntry
from .registry import discover_roles as discover_roles
from .role import RoleActor as RoleActor
from .role import RoleContext as RoleContext
from .role import build_actor as build_actor
from .role import build_team_actors as build_team_actors

__all__ = (
    "Actor",
    "HandlerTasks",
    "RoleActor",
    "RoleContext",
    "RoleEntry",
    "Source",
    "Subscription",
    "UnknownRole",
    "WorkQueue",
    "build_actor",
    "build_team_actors",
    "discover_roles",
    "on",
)
