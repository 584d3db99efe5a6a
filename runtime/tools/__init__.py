"""Tools that plan steps call: the interface, the registry and the built-ins."""

from ._base import GRAMMAR_KEY as GRAMMAR_KEY
from ._base import CheckHook as CheckHook
from ._base import FunctionTool as FunctionTool
from ._base import StructTool as StructTool
from ._base import Tool as Tool
from ._base import args_schema as args_schema
from ._base import check_hook as check_hook
from ._base import openai_spec as openai_spec
from ._base import public_schema as public_schema
from ._base import tool as tool
from .context import StepContext as StepContext
from .context import attempt_key as attempt_key
from .context import current_step as current_step
from .demo import EchoArgs as EchoArgs
from .demo import echo_tool as echo_tool
from .demo import sleep_tool as sleep_tool
from .errors import McpUnavailable as McpUnavailable
from .errors import ToolArgumentsError as ToolArgumentsError
from .errors import ToolError as ToolError
from .errors import ToolInputError as ToolInputError
from .errors import UnknownTool as UnknownTool
from .errors import UnsupportedArchitecture as UnsupportedArchitecture
from .http_get import HttpGetTool as HttpGetTool
from .math_eval import EXPRESSION_GBNF as EXPRESSION_GBNF
from .math_eval import EXPRESSION_PATTERN as EXPRESSION_PATTERN
from .math_eval import MathTool as MathTool
from .math_eval import evaluate as evaluate
from .mcp_servers import McpServer as McpServer
from .mcp_tools import McpTool as McpTool
from .mcp_tools import ServerSurvey as ServerSurvey
from .mcp_tools import open_mcp_tools as open_mcp_tools
from .mcp_tools import survey_mcp_servers as survey_mcp_servers
from .python_runner import PythonRunner as PythonRunner
from .read_file import ReadFileTool as ReadFileTool
from .registry import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
from .registry import ToolRegistry as ToolRegistry
from .registry import builtin_tools as builtin_tools
from .registry import load_plugin_tools as load_plugin_tools
from .sandbox import find_bwrap as find_bwrap
from .step_cgroup import step_cgroup_layout as step_cgroup_layout

__all__ = (
    "ENTRY_POINT_GROUP",
    "EXPRESSION_GBNF",
    "EXPRESSION_PATTERN",
    "GRAMMAR_KEY",
    "CheckHook",
    "EchoArgs",
    "FunctionTool",
    "HttpGetTool",
    "MathTool",
    "McpServer",
    "McpTool",
    "McpUnavailable",
    "PythonRunner",
    "ReadFileTool",
    "ServerSurvey",
    "StepContext",
    "StructTool",
    "Tool",
    "ToolArgumentsError",
    "ToolError",
    "ToolInputError",
    "ToolRegistry",
    "UnknownTool",
    "UnsupportedArchitecture",
    "args_schema",
    "attempt_key",
    "builtin_tools",
    "check_hook",
    "current_step",
    "echo_tool",
    "evaluate",
    "find_bwrap",
    "load_plugin_tools",
    "open_mcp_tools",
    "openai_spec",
    "public_schema",
    "sleep_tool",
    "step_cgroup_layout",
    "survey_mcp_servers",
    "tool",
)
