"""Where benchmark runs happen: a nats-server for the suite, deployments on their own prefix."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from runtime.bus import Bus
from runtime.config import Settings, TeamConfig
from runtime.tools import ToolRegistry
from runtime.worker import open_deployment


def new_prefix() -> str:
    """A fresh subject prefix, so deployments sharing a server never see each other's work."""
    return f"bench{secrets.token_hex(4)}"


def settings_for(nats_url: str, prefix: str) -> Settings:
    return Settings(nats_url=nats_url, prefix=prefix)


@asynccontextmanager
async def deployment(
    nats_url: str, team: TeamConfig, tools: ToolRegistry, *, roles: list[str] | None = None,
    prefix: str | None = None,
) -> AsyncIterator[Bus]:
    """The team's roles (or ``roles``) served in this process on a fresh prefix."""
    settings = settings_for(nats_url, prefix or new_prefix())
    async with open_deployment(settings, team, tools, roles=roles) as bus:
        yield bus
