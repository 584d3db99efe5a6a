"""A small MCP server built with the official SDK, run as its own process by the tests (and
by examples/mcp): ``python tests/mcp/server.py [stdio | http PORT]``.

Its tools: ``add`` (two integers), ``lookup`` (a fact from a fixed table; an unknown key is
an ``isError`` result), ``square`` (a negative count is a JSON-RPC invalid-params
error), ``slow`` (sleeps, writing its process id to ``$MCP_TEST_MARKER``
first so a test knows the call is in hand), ``read_text`` (a file's text: what a sandbox
hides) ``pid`` (its process id: a restarted server answers with another) and ``key_seen`` (the
idempotency key a call carries in its ``_meta``).
"""

from __future__ import annotations

import os
import sys
import time

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

FACTS = {"nats": "NATS is a messaging system; JetStream is its persistence layer.",
         "plancast": "plancast runs planner-executor agent teams over NATS."}

server = MCPServer("plancast-test")


@server.tool(description="Add two integers; returns their sum.")
def add(a: int, b: int) -> str:
    return str(a + b)


@server.tool(description="Look a fact up by key (nats, plancast).")
def lookup(key: str) -> str:
    if key not in FACTS:
        raise ToolError(f"no fact named {key!r}; known keys: {', '.join(sorted(FACTS))}")
    return FACTS[key]


@server.tool(description="Square a count (at least 0).")
def square(n: int) -> str:
    if n < 0:  # a JSON-RPC error, not an isError result: the arguments' fault
        raise MCPError(INVALID_PARAMS, f"n must be at least 0, not {n}")
    return str(n * n)


@server.tool(description="Sleep for some seconds, then answer 'slept'.")
async def slow(seconds: float) -> str:
    marker = os.environ.get("MCP_TEST_MARKER")
    if marker:
        await anyio.Path(marker).write_text(str(os.getpid()))
    await anyio.sleep(seconds)
    return "slept"


@server.tool(description="The text of a file.")
async def read_text(path: str) -> str:
    try:
        return await anyio.Path(path).read_text()
    except OSError as exc:
        raise ToolError(f"cannot read {path}: {exc.strerror}") from None


@server.tool(description="The idempotency key the call carries in its _meta, if any.")
def key_seen(ctx: Context) -> str:  # type: ignore[type-arg]
    meta = ctx.request_context.meta or {}
    return str(meta.get("plancast/idempotency-key", "none"))


@server.tool(description="The server's process id.")
def pid() -> str:
    return str(os.getpid())


def main(argv: list[str]) -> None:
    if argv[:1] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(argv[1]))
    else:
        server.run("stdio")


if __name__ == "__main__":
    time.sleep(float(os.environ.get("MCP_TEST_START_DELAY", "0")))
    main(sys.argv[1:])
