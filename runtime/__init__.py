"""The plancast machinery: NATS transport, actors, scheduling, models, tools, roles, CLI."""

from .actor import Actor as Actor
from .actor import Subscription as Subscription
from .actor import WorkQueue as WorkQueue
from .actor import on as on
from .bus import Bus as Bus
from .client import RunNotAccepted as RunNotAccepted
from .client import RunStalled as RunStalled
from .client import follow as follow
from .client import submit as submit
from .connection import NatsUnreachable as NatsUnreachable
from .connection import open_bus as open_bus
from .delivery import Delivery as Delivery
from .embedded import NatsServerProcess as NatsServerProcess
from .embedded import open_embedded_server as open_embedded_server
from .errors import PlancastError as PlancastError
from .errors import PlanValidationError as PlanValidationError
from .llm import ModelClient as ModelClient
from .llm import ModelSettings as ModelSettings
from .process import open_deployment as open_deployment
from .process import serve_actors as serve_actors
from .role import RoleActor as RoleActor
from .role import RoleContext as RoleContext
from .role import UnknownRole as UnknownRole
from .scheduler import Scheduler as Scheduler
from .settings import Settings as Settings
from .team import RoleConfig as RoleConfig
from .team import TeamConfig as TeamConfig
from .team import load_team as load_team
from .team import team_from_dict as team_from_dict
from .tools import Tool as Tool
from .tools import ToolRegistry as ToolRegistry
from .tools import builtin_tools as builtin_tools

__all__ = [
    "Actor", "Bus", "Delivery", "ModelClient", "ModelSettings", "NatsServerProcess",
    "NatsUnreachable", "PlanValidationError", "PlancastError", "RoleActor", "RoleConfig",
    "RoleContext", "RunNotAccepted", "RunStalled", "Scheduler", "Settings", "Subscription",
    "TeamConfig", "Tool", "ToolRegistry",
    "UnknownRole", "WorkQueue", "builtin_tools", "follow", "load_team", "on",
    "open_bus", "open_deployment", "open_embedded_server", "serve_actors", "submit",
    "team_from_dict",
]
