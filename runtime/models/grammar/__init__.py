"""Grammars that keep a model to what the scheduler accepts: GBNF (llama.cpp), JSON in GBNF,
the plan constraint and its JSON Schema form."""

from .gbnf import Alt as Alt
from .gbnf import Chars as Chars
from .gbnf import Expr as Expr
from .gbnf import Grammar as Grammar
from .gbnf import Lit as Lit
from .gbnf import Ref as Ref
from .gbnf import Rep as Rep
from .gbnf import Seq as Seq
from .gbnf import render as render
from .gbnf_json import JsonRules as JsonRules
from .plan import MAX_CONSTRAINED_STEPS as MAX_CONSTRAINED_STEPS
from .plan import TEXT_CHARS as TEXT_CHARS
from .plan import PlanShape as PlanShape
from .plan import RoleTools as RoleTools
from .plan import plan_grammar as plan_grammar
from .plan import plan_shape as plan_shape
from .plan_schema import PLAN_SCHEMA_NAME as PLAN_SCHEMA_NAME
from .plan_schema import drop_nulls as drop_nulls
from .plan_schema import plan_schema as plan_schema
from .plan_schema import strict_object as strict_object

__all__ = (
    "MAX_CONSTRAINED_STEPS",
    "PLAN_SCHEMA_NAME",
    "TEXT_CHARS",
    "Alt",
    "Chars",
    "Expr",
    "Grammar",
    "JsonRules",
    "Lit",
    "PlanShape",
    "Ref",
    "Rep",
    "RoleTools",
    "Seq",
    "drop_nulls",
    "plan_grammar",
    "plan_schema",
    "plan_shape",
    "render",
    "strict_object",
)
