"""Tools that plan steps call: the interface, the registry and the built-ins."""

from ._base import FunctionTool as FunctionTool
from ._base import StructTool as StructTool
from ._base import Tool as Tool
from ._base import openai_spec as openai_spec
from ._base import tool as tool
from .demo import echo_tool as echo_tool
from .demo import sleep_tool as sleep_tool
from .http_get import HttpGetTool as HttpGetTool
from .math_eval import MathTool as MathTool
from .python_runner import PythonRunner as PythonRunner
from .read_file import ReadFileTool as ReadFileTool
from .registry import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
from .registry import ToolRegistry as ToolRegistry
from .registry import builtin_tools as builtin_tools
from .registry import load_plugin_tools as load_plugin_tools

__all__ = [
    "ENTRY_POINT_GROUP",
    "FunctionTool",
    "HttpGetTool",
    "MathTool",
    "PythonRunner",
    "ReadFileTool",
    "StructTool",
    "Tool",
    "ToolRegistry",
    "builtin_tools",
    "echo_tool",
    "load_plugin_tools",
    "openai_spec",
    "sleep_tool",
    "tool",
]
