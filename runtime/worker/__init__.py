"""Serving actors in a process: the team checked before anything starts, the actors
supervised (OTP-style) and drained in order on SIGTERM, the event loop chosen."""

from .errors import ChildExited as ChildExited
from .errors import SupervisorEscalation as SupervisorEscalation
from .loop import backend_options as backend_options
from .loop import tune_gc as tune_gc
from .process import open_deployment as open_deployment
from .process import serve_actors as serve_actors
from .supervisor import ChildSpec as ChildSpec
from .supervisor import Restart as Restart
from .supervisor import Strategy as Strategy
from .supervisor import Supervisor as Supervisor
from .supervisor import process_child as process_child
from .team_checks import preflight as preflight
from .team_checks import preflight_problems as preflight_problems

__all__ = (
    "ChildExited",
    "ChildSpec",
    "Restart",
    "Strategy",
    "Supervisor",
    "SupervisorEscalation",
    "backend_options",
    "open_deployment",
    "preflight",
    "preflight_problems",
    "process_child",
    "serve_actors",
    "tune_gc",
)
