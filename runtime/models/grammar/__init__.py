"""grammar."""
from .gbnf import Grammar as Grammar
from .gbnf_json import JsonRules as JsonRules
from .plan import PlanShape as PlanShape
from .plan import plan_grammar as plan_grammar
from .plan_schema import PLAN_SCHEMA_NAME as PLAN_SCHEMA_NAME
from .plan_schema import plan_schema as plan_schema
from .plan_schema import strict_object as strict_object

__all__ = (
    "PLAN_SCHEMA_NAME",
    "Grammar",
    "JsonRules",
    "PlanShape",
    "plan_grammar",
    "plan_schema",
    "strict_object",
)
