"""dag."""
from .code_inputs import INPUTS_FILE as INPUTS_FILE
from .code_inputs import bind_inputs as bind_inputs
from .graph import references as references
from .scheduler import Scheduler as Scheduler
from .states import StepState as StepState

__all__ = (
    "INPUTS_FILE",
    "Scheduler",
    "StepState",
    "bind_inputs",
    "references",
)
