"""The plan as a DAG: which steps may run now, where each step is in its life, and how
steps refer to each other (``$N``). Pure logic, no I/O: the planner drives it."""

from .errors import PlanValidationError as PlanValidationError
from .errors import StepStateError as StepStateError
from .graph import CODE_ARGS as CODE_ARGS
from .graph import REF as REF
from .graph import ref_id as ref_id
from .graph import references as references
from .scheduler import Scheduler as Scheduler
from .states import StepState as StepState

__all__ = (
    "CODE_ARGS",
    "REF",
    "PlanValidationError",
    "Scheduler",
    "StepState",
    "StepStateError",
    "ref_id",
    "references",
)
