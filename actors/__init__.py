"""The built-in roles, registered through the ``plancast.roles`` entry points like any plugin."""

from .critic import Critic as Critic
from .executor import Executor as Executor
from .finished import InHand as InHand
from .planner import Planner as Planner
from .supervisor import SupervisorActor as SupervisorActor
from .synthesizer import Synthesizer as Synthesizer

__all__ = (
    "Critic",
    "Executor",
    "InHand",
    "Planner",
    "SupervisorActor",
    "Synthesizer",
)
