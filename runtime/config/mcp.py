"""MCP servers as tool sources: how the team file declares them and names their tools.

Each ``[mcp.NAME]`` table is one server: a program the worker starts and talks to over its
stdin and stdout (``command``, ``args``, ``env``, ``cwd``), or a streamable-HTTP endpoint
it connects to (``url``, ``headers``). A role may use a server's tool only if its
``tools`` list names it as ``NAME__TOOL`` (``fs__read_text_file``): nothing by default::

    [mcp.fs]
    command = "npx"
    args = ["@modelcontextprotocol/server-filesystem", "/srv/notes"]

    [roles.researcher]
    tools = ["fs__read_text_file", "math"]
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

MCP_SEPARATOR = "__"
"""Between a server's name and its tool's in the name plans and models use: a tool name
must match ``[a-zA-Z0-9_-]{1,64}`` (the OpenAI rule), so no dot or slash."""


class McpServerConfig(BaseModel):
    """One MCP server: a stdio program (``command``) or a streamable-HTTP ``url``."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    command: str = ""
    """The program that serves MCP on its stdin and stdout (``npx``, ``uvx``, a path)."""
    args: list[str] = Field(default_factory=list)
    """Its arguments."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables added to its environment (a sandboxed server gets only these, and PATH)."""
    cwd: Path | None = None
    """Its working directory (default: the worker's)."""
    url: str = ""
    """A streamable-HTTP MCP endpoint (``http://127.0.0.1:8000/mcp``), instead of a command."""
    headers: dict[str, str] = Field(default_factory=dict)
    """HTTP headers sent with every request to ``url`` (e.g. ``Authorization``)."""
    sandbox: bool = False
    """Run the stdio server inside bubblewrap like the ``python`` tool: read-only system,
    no network, no home; ``cwd`` (or a private empty directory) is the only writable place."""
    start_timeout: float = Field(default=30.0, gt=0)
    """Seconds to start (or connect), initialize and list the tools before giving up."""

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if bool(self.command) == bool(self.url):
            raise ValueError("an MCP server needs either `command = \"...\"` (a program that "
                             "speaks MCP on stdio) or `url = \"http://...\"` (streamable HTTP), "
                             "not both and not neither")
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url {self.url!r} must start with http:// or https://")
        if self.url and (self.args or self.env or self.cwd or self.sandbox):
            raise ValueError("args, env, cwd and sandbox are for a stdio server (`command`); "
                             "a `url` server takes `headers`")
        if self.command and self.headers:
            raise ValueError("headers are for a streamable-HTTP server (`url`)")
        return self

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"


def split_mcp_tool(name: str) -> tuple[str, str] | None:
    """``(server, tool)`` for a tool name of the ``server__tool`` form, else None."""
    server, sep, tool = name.partition(MCP_SEPARATOR)
    return (server, tool) if sep and server and tool else None


def mcp_tool_name(server: str, tool: str) -> str:
    """The name plans and models call a server's tool by."""
    return f"{server}{MCP_SEPARATOR}{tool}"
