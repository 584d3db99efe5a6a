"""Tools by name: the built-ins plus whatever installed packages offer.

Third-party packages add tools through the ``plancast.tools`` entry point group, each
entry naming a Tool instance or a zero-argument factory (a class or function) of one. A
plugin that fails to load is logged and skipped, so one broken package cannot stop a worker.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from importlib.metadata import entry_points
from typing import Any

from ._base import Tool, openai_spec
from .demo import echo_tool, sleep_tool
from .errors import UnknownTool
from .http_get import HttpGetTool
from .math_eval import MathTool
from .python_runner import PythonRunner
from .read_file import ReadFileTool

ENTRY_POINT_GROUP = "plancast.tools"
_VALID_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")

logger = logging.getLogger(__name__)


class ToolRegistry:
    """A name → Tool mapping that answers lookups with errors a model can act on."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for item in tools:
            self.add(item)

    def add(self, tool: Tool, *, replace: bool = False) -> None:
        """Register ``tool``; a second tool of the same name is an error unless ``replace``."""
        if not _VALID_NAME.fullmatch(tool.name):
            raise ValueError(f"tool name {tool.name!r} must match [a-zA-Z0-9_-]{{1,64}}")
        if tool.name in self._tools and not replace:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool:
        """The tool called ``name``; UnknownTool lists the names that do exist."""
        try:
            return self._tools[name]
        except KeyError:
            known = ", ".join(sorted(self._tools)) or "none"
            raise UnknownTool(f"no tool named {name!r}; known tools: {known}") from None

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._tools)

    def subset(self, names: Iterable[str]) -> ToolRegistry:
        """A registry of just ``names`` (for a role or a step); unknown names raise UnknownTool."""
        return ToolRegistry(self.get(name) for name in dict.fromkeys(names))

    def specs(self, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """OpenAI ``tools=[...]`` entries for ``names`` (default: all), in the order given."""
        chosen = self.names() if names is None else list(dict.fromkeys(names))
        return [openai_spec(self.get(name)) for name in chosen]

    async def run(self, name: str, args: dict[str, Any]) -> str:
        """Look up and run a tool (UnknownTool, ToolArgumentsError or ToolError on failure)."""
        return await self.get(name).run(args)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter([self._tools[name] for name in self.names()])

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"ToolRegistry({self.names()})"


def builtin_tools(
    *,
    files_root: str | os.PathLike[str] | None = None,
    python_timeout: float = 10.0,
    python_memory_mb: int = 1024,
    http_timeout: float = 15.0,
    http_max_bytes: int = 200_000,
    plugins: bool = True,
    sandbox: str = "bwrap",
    http_allow: Sequence[str] = (),
) -> ToolRegistry:
    """python, math, http_get, echo, sleep, read_file (only with ``files_root``) and plugins.

    Plugins from the ``plancast.tools`` entry point group are added when ``plugins`` is
    true; one that clashes with a name already registered is skipped with a warning.
    """
    registry = ToolRegistry(
        [
            PythonRunner(timeout=python_timeout, memory_mb=python_memory_mb, sandbox=sandbox),
            MathTool(),
            HttpGetTool(timeout=http_timeout, max_bytes=http_max_bytes, allow=http_allow),
            echo_tool,
            sleep_tool,
        ]
    )
    if files_root is not None:
        registry.add(ReadFileTool(files_root))
    if plugins:
        for plugin in load_plugin_tools():
            if plugin.name in registry:
                logger.warning("skipping plugin tool %r: the name is taken", plugin.name)
            else:
                registry.add(plugin)
    return registry


def load_plugin_tools(group: str = ENTRY_POINT_GROUP) -> list[Tool]:
    """Tools from installed entry points; each one that fails is logged and skipped."""
    tools: list[Tool] = []
    for point in entry_points(group=group):
        try:
            loaded = point.load()
            is_instance = isinstance(loaded, Tool) and not isinstance(loaded, type)
            made = loaded if is_instance else loaded()
            if not isinstance(made, Tool):
                raise TypeError(f"{type(made).__name__} is not a Tool")
            if not _VALID_NAME.fullmatch(made.name):
                raise ValueError(f"invalid tool name {made.name!r}")
        except Exception as exc:
            logger.warning(
                "skipping tool entry point %r (%s): %s: %s",
                point.name,
                point.value,
                type(exc).__name__,
                exc,
            )
            continue
        tools.append(made)
    return tools
