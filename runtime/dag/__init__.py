"""dag."""
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
