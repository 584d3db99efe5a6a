"""Model calls through the official openai client (the only package that imports openai):
the client, streamed plans read line by line or step by step, structured output in each
server's dialect, failures named in one line, token estimates and a local llama.cpp server."""

from .chat_stream import SseEvents as SseEvents
from .chat_stream import decode_chunk as decode_chunk
from .client import ChatMessage as ChatMessage
from .client import LineStream as LineStream
from .client import ModelClient as ModelClient
from .client import split_lines as split_lines
from .errors import GrammarTextError as GrammarTextError
from .errors import LocalModelMissing as LocalModelMissing
from .errors import LocalModelStartError as LocalModelStartError
from .errors import ModelError as ModelError
from .errors import ScenarioHasNoAnswer as ScenarioHasNoAnswer
from .errors import StructuredOutputUnsupported as StructuredOutputUnsupported
from .grammar import MAX_CONSTRAINED_STEPS as MAX_CONSTRAINED_STEPS
from .grammar import TEXT_CHARS as TEXT_CHARS
from .grammar import Alt as Alt
from .grammar import Chars as Chars
from .grammar import Expr as Expr
from .grammar import Grammar as Grammar
from .grammar import JsonRules as JsonRules
from .grammar import Lit as Lit
from .grammar import PlanShape as PlanShape
from .grammar import Ref as Ref
from .grammar import Rep as Rep
from .grammar import RoleTools as RoleTools
from .grammar import Seq as Seq
from .grammar import drop_nulls as drop_nulls
from .grammar import plan_grammar as plan_grammar
from .grammar import plan_schema as plan_schema
from .grammar import plan_shape as plan_shape
from .grammar import render as render
from .grammar import strict_object as strict_object
from .json_stream import StepArrayReader as StepArrayReader
from .llama_server import DEFAULT_ALIAS as DEFAULT_ALIAS
from .llama_server import INSTALL_HINT as INSTALL_HINT
from .llama_server import N_CTX as N_CTX
from .llama_server import LlamaServer as LlamaServer
from .llama_server import missing_packages as missing_packages
from .structured import Constraint as Constraint
from .structured import answer_constraint as answer_constraint
from .structured import plan_constraint as plan_constraint
from .structured import refusal as refusal
from .token_estimate import estimate_messages as estimate_messages
from .token_estimate import estimate_text as estimate_text

__all__ = (
    "DEFAULT_ALIAS",
    "INSTALL_HINT",
    "MAX_CONSTRAINED_STEPS",
    "N_CTX",
    "TEXT_CHARS",
    "Alt",
    "Chars",
    "ChatMessage",
    "Constraint",
    "Expr",
    "Grammar",
    "GrammarTextError",
    "JsonRules",
    "LineStream",
    "Lit",
    "LlamaServer",
    "LocalModelMissing",
    "LocalModelStartError",
    "ModelClient",
    "ModelError",
    "PlanShape",
    "Ref",
    "Rep",
    "RoleTools",
    "ScenarioHasNoAnswer",
    "Seq",
    "SseEvents",
    "StepArrayReader",
    "StructuredOutputUnsupported",
    "answer_constraint",
    "decode_chunk",
    "drop_nulls",
    "estimate_messages",
    "estimate_text",
    "missing_packages",
    "plan_constraint",
    "plan_grammar",
    "plan_schema",
    "plan_shape",
    "refusal",
    "render",
    "split_lines",
    "strict_object",
)
