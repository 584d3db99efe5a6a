"""The plancast machinery, for programs and plugin authors: the names most of them need, from
the packages below (config, dag, bus, models, tools, telemetry, client, actor, worker,
gateway, cli, testing), each of which is also a face of its own."""

from .actor import Actor as Actor
from .actor import RoleActor as RoleActor
from .actor import RoleContext as RoleContext
from .actor import Subscription as Subscription
from .actor import UnknownRole as UnknownRole
from .actor import WorkQueue as WorkQueue
from .actor import on as on
from .bus import Bus as Bus
from .bus import Delivery as Delivery
from .bus import NatsServerProcess as NatsServerProcess
from .bus import NatsUnreachable as NatsUnreachable
from .bus import open_bus as open_bus
from .bus import open_embedded_server as open_embedded_server
from .client import RunNotAccepted as RunNotAccepted
from .client import RunStalled as RunStalled
from .client import follow as follow
from .client import submit as submit
from .config import ModelSettings as ModelSettings
from .config import RoleConfig as RoleConfig
from .config import Settings as Settings
from .config import TeamConfig as TeamConfig
from .config import load_team as load_team
from .config import team_from_dict as team_from_dict
from .dag import PlanValidationError as PlanValidationError
from .dag import Scheduler as Scheduler
from .errors import PlancastError as PlancastError
from .errors import SetupError as SetupError
from .models import ModelClient as ModelClient
from .tools import Tool as Tool
from .tools import ToolRegistry as ToolRegistry
from .tools import builtin_tools as builtin_tools
from .worker import open_deployment as open_deployment
from .worker import serve_actors as serve_actors

__all__ = (
    "Actor",
    "Bus",
    "Delivery",
    "ModelClient",
    "ModelSettings",
    "NatsServerProcess",
    "NatsUnreachable",
    "PlanValidationError",
    "PlancastError",
    "RoleActor",
    "RoleConfig",
    "RoleContext",
    "RunNotAccepted",
    "RunStalled",
    "Scheduler",
    "Settings",
    "SetupError",
    "Subscription",
    "TeamConfig",
    "Tool",
    "ToolRegistry",
    "UnknownRole",
    "WorkQueue",
    "builtin_tools",
    "follow",
    "load_team",
    "on",
    "open_bus",
    "open_deployment",
    "open_embedded_server",
    "serve_actors",
    "submit",
    "team_from_dict",
)
