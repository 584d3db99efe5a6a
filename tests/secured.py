"""A real nats-server with one user per role (``plancast auth init``), provisioned by the
admin, for tests of rights and of roles written in other languages."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import nats

from runtime.bus import (
    CONF_FILE,
    NatsServerProcess,
    creds_file,
    open_bus,
    provision_consumers,
    write_auth,
)
from runtime.config import Settings, TeamConfig
from runtime.tools import ToolRegistry, builtin_tools
from runtime.worker import open_deployment


@dataclass
class Secured:
    server: NatsServerProcess
    team: TeamConfig
    creds: Path
    prefix: str

    def settings(self, user: str) -> Settings:
        return Settings(nats_url=self.server.url, prefix=self.prefix,
                        creds=self.path(user), connect_timeout=3)

    def path(self, user: str) -> Path:
        """``user``'s credentials file."""
        return creds_file(self.creds, user)

    def user(self, user: str) -> dict[str, str]:
        """What ``user``'s credentials file says (a NATS context: url, user, password ...)."""
        context: dict[str, str] = json.loads(self.path(user).read_text())
        return context

    async def connect(self, user: str, errors: list[str], seen: anyio.Event) -> nats.NATS:
        """A raw connection as ``user``; its asynchronous errors go to ``errors``."""
        async def on_error(exc: Exception) -> None:
            errors.append(str(exc).lower())
            seen.set()

        creds = self.user(user)
        return await nats.connect(self.server.url, user=creds["user"],
                                  password=creds["password"], error_cb=on_error,
                                  inbox_prefix=creds["inbox_prefix"], max_reconnect_attempts=0)

    @asynccontextmanager
    async def serving(self, roles: Sequence[str],
                      tools: ToolRegistry | None = None) -> AsyncIterator[None]:
        """Each of ``roles`` in its own connection, as its own user (with ``tools``, or the
        built-in ones)."""
        async with AsyncExitStack() as stack:
            for role in roles:
                await stack.enter_async_context(open_deployment(
                    self.settings(role), self.team, tools or builtin_tools(plugins=False),
                    roles=[role]))
            yield


@asynccontextmanager
async def secured_server(base: Path, prefix: str, team: TeamConfig) -> AsyncIterator[Secured]:
    """A server whose only users are the team's, provisioned by its admin."""
    write_auth(base / "auth", prefix, team)
    conf = (base / "auth" / CONF_FILE).read_text()
    with NatsServerProcess(base / "nats", extra_config=[conf]) as server:
        secured = Secured(server, team, base / "auth", prefix)
        async with open_bus(secured.settings("admin")) as admin:
            await provision_consumers(admin.js, team, admin.settings)
        yield secured
