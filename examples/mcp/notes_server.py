"""A notes server: the team's researcher reads these notes through MCP.

A stand-in for any MCP server (a company wiki, a filesystem, a database): written with the
official SDK in a few lines, it serves the Markdown files of ``notes/`` beside it over
stdio. plancast starts it (``[mcp.notes]`` in team.toml) and the planner and the model see
its tools as ``notes__search`` and ``notes__read``.
"""

from __future__ import annotations

from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

NOTES = Path(__file__).with_name("notes")

server = MCPServer("notes")


@server.tool(description="Names of the notes that mention a word (case-insensitive).")
def search(word: str) -> str:
    found = [p.name for p in sorted(NOTES.glob("*.md")) if word.lower() in p.read_text().lower()]
    return "\n".join(found) or f"no note mentions {word!r}"


@server.tool(description="The text of one note, by its name (e.g. jetstream.md).")
def read(name: str) -> str:
    path = NOTES / name
    if path.parent != NOTES or not path.is_file():
        names = ", ".join(p.name for p in sorted(NOTES.glob("*.md")))
        raise ToolError(f"no note named {name!r}; the notes: {names}")
    return path.read_text()


if __name__ == "__main__":
    server.run("stdio")
