"""MCP servers as separate processes for the tests: ours, built with the official SDK
(``server.py``, over stdio or streamable HTTP), and the published reference filesystem
server from the npm registry (installed from ``package-lock.json`` on first use)."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from ..needs import missing, require
from ..subprocesses import background, clean_env

HERE = Path(__file__).parent
SERVER = HERE / "server.py"


def stdio_server(script: Path = SERVER, **env: str) -> dict[str, Any]:
    """A team file's ``[mcp.NAME]`` table that starts our server over stdio."""
    return {"command": sys.executable, "args": [str(script)], "env": env}


async def kill_in_call(marker: Path, timeout: float = 60.0) -> None:
    """SIGKILL our server once a ``slow`` call is in hand (it writes its pid to ``marker``,
    from another process: a file is the only signal there is)."""
    path = anyio.Path(marker)
    with anyio.fail_after(timeout):
        while not await path.exists():  # noqa: ASYNC110
            await anyio.sleep(0.02)
    os.kill(int(await path.read_text()), signal.SIGKILL)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def http_server() -> AsyncIterator[str]:
    """Our server on streamable HTTP in a process of its own; yields its endpoint URL once
    it says it listens."""
    port = free_port()
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(SERVER))} http {port}"
    async with background(command, cwd=HERE, env=clean_env()) as server:
        await server.says("Uvicorn running on")
        yield f"http://127.0.0.1:{port}/mcp"


def filesystem_server() -> list[str]:
    """The command of the reference filesystem server (``npm ci`` here, once); skips naming
    the package to install without Node.js or npm."""
    node = require("node", "nodejs npm")
    main = HERE / "node_modules" / "@modelcontextprotocol" / "server-filesystem" / "dist" / \
        "index.js"
    if not main.exists():
        npm = require("npm", "npm")
        try:
            subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=HERE, check=True,
                           capture_output=True, timeout=300)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            said = (exc.stderr or b"").decode(errors="replace").strip().splitlines()
            missing(f"npm ci could not install the filesystem server here "
                    f"({said[-1] if said else exc}): run it in {HERE} with the registry reachable")
    return [node, str(main)]
