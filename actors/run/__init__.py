"""The life of one run, behind a narrow interface: what a planner needs to take a run on,
drive it and route its outcomes to it, and what tests check of its parts.

A planner builds one ``RunEnv`` (what it lends each run), rebuilds a run's state
(``restore``, and after a takeover ``read_tail``/``fold``) and hands both to ``Run``. The
run's policies use the run only through ``RunOps``.
"""

from ._api import RunOps as RunOps
from .env import RunEnv as RunEnv
from .event_log import EventLog as EventLog
from .event_log import identity as identity
from .gates import why_gated as why_gated
from .plan import GIVEN_PLAN as GIVEN_PLAN
from .plan import SaveBehind as SaveBehind
from .resume import Tail as Tail
from .resume import fold as fold
from .resume import planned_steps as planned_steps
from .resume import read_tail as read_tail
from .review import review_problem as review_problem
from .run import Run as Run
from .save import RunSaver as RunSaver
from .state import LostRun as LostRun
from .state import RunFailure as RunFailure
from .state import RunState as RunState
from .state import RunStore as RunStore
from .state import StepMeta as StepMeta
from .state import restore as restore

__all__ = (
    "GIVEN_PLAN",
    "EventLog",
    "LostRun",
    "Run",
    "RunEnv",
    "RunFailure",
    "RunOps",
    "RunSaver",
    "RunState",
    "RunStore",
    "SaveBehind",
    "StepMeta",
    "Tail",
    "fold",
    "identity",
    "planned_steps",
    "read_tail",
    "restore",
    "review_problem",
    "why_gated",
)
