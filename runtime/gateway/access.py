"""Who may use ``plancast serve``: the gateway's token, and the hosts and origins it answers.

A gateway on localhost is reachable from every web page the user opens: a page of another
origin can send it a "simple" request (``text/plain`` or form body, no preflight) even
though it cannot read the answer, and a DNS name rebound to 127.0.0.1 makes the browser
treat the gateway as the attacker's own origin. So every request but the dashboard page
and the OpenAPI document needs the token (``Authorization: Bearer``, compared in constant
time); a request naming a ``Host`` the gateway does not answer to is refused (rebinding);
one whose ``Origin`` is not the gateway's own (or an allowed one) is refused; and a request
that changes state must say its body is JSON, so no form or ``text/plain`` body is read
as JSON. The token lives in a file only its owner can read, in the data directory.

Each token names a user, and a decision made through the gateway is recorded as that
user's: by default the one token is the user running ``plancast serve``; a users file
(``--users`` / ``PLANCAST_GATEWAY_USERS``, mode 0600, a ``name token`` line per person)
gives each person a token of their own.
"""

from __future__ import annotations

import getpass
import hmac
import ipaddress
import os
import re
import secrets
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import GatewayAccessError

TOKEN_FILE = "gateway.token"
"""The gateway's token, in the data directory (mode 0600)."""
MIN_TOKEN_CHARS = 16
"""A shorter token (a given one) is refused: it could be guessed."""
PUBLIC = frozenset({("GET", "/"), ("HEAD", "/"), ("GET", "/openapi.json"),
                    ("HEAD", "/openapi.json")})
"""What anyone may fetch: the dashboard page (no data in it) and the API's schema."""
PUBLIC_PREFIX = "/dashboard/"
"""The page's own scripts and styles, public like the page."""
READS = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods that change nothing, so carry no body to check."""
LOCAL_NAMES = frozenset({"localhost"})
"""Host names always answered, besides IP literals (which no DNS can rebind)."""
WILDCARDS = frozenset({"", "0.0.0.0", "::"})
USER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
"""A user's name in a users file: what a run's events record as who decided."""
USER_KEY = "plancast.user"
"""Where ``Guard`` leaves the name of the user a request's token names, in its scope."""
HOST_HEADER = re.compile(r"(?:\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9.-]+))(?::\d{1,5})?")
"""A Host header: a name or address, and maybe a port (nothing else, no user part)."""


@dataclass(frozen=True)
class Access:
    """What a request must show to be served."""

    users: tuple[tuple[str, str], ...]
    """Each user's name and token: every request but ``PUBLIC`` ones carries one as
    ``Authorization: Bearer <token>``, and acts as that user."""
    origins: frozenset[str] = frozenset()
    """Origins allowed besides the gateway's own (``https://plancast.example.com`` behind a
    proxy), lower case, no trailing slash."""
    hosts: frozenset[str] = frozenset()
    """Host names answered besides ``localhost`` and IP literals: the bound name, names of a
    proxy or of the machine."""

    @classmethod
    def of(cls, users: Mapping[str, str], *, bound: str, origins: Iterable[str] = (),
           hosts: Iterable[str] = ()) -> Access:
        """The access of a gateway listening on ``bound`` for ``users`` (name: token): its
        name and those of the allowed origins are answered too."""
        if not users:
            raise GatewayAccessError("the gateway has no user: give it a token, or a users "
                                     "file with a `name token` line per person")
        for name, token in users.items():
            if not USER_NAME.fullmatch(name):
                raise GatewayAccessError(
                    f"user name {name!r}: use 1 to 64 letters, digits, '.', '_', '@' or '-'")
            if len(token) < MIN_TOKEN_CHARS or any(c.isspace() for c in token):
                raise GatewayAccessError(
                    f"the gateway's token{f' of user {name}' if len(users) > 1 else ''} must "
                    f"be at least {MIN_TOKEN_CHARS} characters with no spaces; unset "
                    "PLANCAST_GATEWAY_TOKEN to have one made")
        if len(set(users.values())) < len(users):
            raise GatewayAccessError("two users have the same token: give each its own "
                                     "(`python -c 'import secrets; print(secrets."
                                     "token_urlsafe(32))'`)")
        allowed = {o.strip().rstrip("/").lower() for o in origins if o.strip()}
        for origin in allowed:
            parts = urlsplit(origin)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.path:
                raise GatewayAccessError(
                    f"allowed origin {origin!r} is not scheme://host[:port] "
                    "(e.g. https://plancast.example.com)")
        names = {h.strip().lower() for h in hosts if h.strip()}
        names |= {str(urlsplit(o).hostname) for o in allowed}
        if bound.lower() not in WILDCARDS:
            names.add(bound.strip("[]").lower())
        return cls(users=tuple(users.items()), origins=frozenset(allowed),
                   hosts=frozenset(names))

    def answers_host(self, host: str) -> bool:
        """Whether ``host`` (a Host header) names this gateway: never a DNS name rebound."""
        match = HOST_HEADER.fullmatch(host)
        if match is None:
            return False
        name = (match["ipv6"] or match["name"]).lower()
        if name in LOCAL_NAMES or name in self.hosts:
            return True
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True

    def user_of(self, authorization: str) -> str | None:
        """The user whose token an ``Authorization`` header carries, None if none: every
        token is compared, each in constant time, so the time taken tells nothing."""
        scheme, _, given = authorization.partition(" ")
        offered, found = given.strip().encode(), None
        for name, token in self.users:
            if hmac.compare_digest(offered, token.encode()):
                found = name
        return found if scheme.lower() == "bearer" else None


class Guard:
    """ASGI middleware refusing what ``Access`` does not allow, before any route runs."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = self.refusal(scope)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def refusal(self, scope: Scope) -> Response | None:
        """Why this request is not served (None: it is), checked in order: the Host it
        names, its Origin, its token, and for a change its body's type. A request served
        with a token has its user's name in ``scope[USER_KEY]``."""
        headers = Headers(scope=scope)
        method, path = scope["method"], scope["path"]
        host = headers.get("host", "")
        if not self.access.answers_host(host):
            return _refuse(400, f"this gateway does not answer to Host {host!r}: use "
                           "localhost, an IP address, or a name given with --allow-host")
        origin = headers.get("origin")
        own = f"{scope.get('scheme', 'http')}://{host}".lower()
        if origin is not None and origin.lower() not in self.access.origins | {own}:
            return _refuse(403, f"requests from origin {origin!r} are refused: only pages "
                           f"the gateway serves ({own}) may use it, and origins given with "
                           "--allow-origin")
        if (method, path) in PUBLIC or (method in ("GET", "HEAD")
                                          and path.startswith(PUBLIC_PREFIX)):
            return None
        user = self.access.user_of(headers.get("authorization", ""))
        if user is None:
            response = _refuse(401, "this gateway needs its token: send `Authorization: "
                               "Bearer <token>` (`plancast serve` prints it, and keeps it in "
                               f"{TOKEN_FILE} in its data directory)")
            response.headers["WWW-Authenticate"] = 'Bearer realm="plancast"'
            return response
        media = headers.get("content-type", "").partition(";")[0].strip().lower()
        if method not in READS and media != "application/json":
            return _refuse(415, f"a {method} body must be JSON, sent with `Content-Type: "
                           f"application/json` (this one is {media or 'untyped'!r})")
        scope[USER_KEY] = user
        return None


def _refuse(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status)


def gateway_token(data_dir: Path, given: str | None = None) -> str:
    """The token: ``given`` (a setting), else the one kept in ``data_dir``, else a new one
    written there first, readable by its owner only."""
    if given:
        return given
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = data_dir / TOKEN_FILE
    try:
        return _read_token(path)
    except FileNotFoundError:
        pass
    token = secrets.token_urlsafe(32)
    fd, temporary = tempfile.mkstemp(dir=data_dir, prefix=f".{TOKEN_FILE}.")  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(token + "\n")
        try:
            os.link(temporary, path)  # whole, and never over another gateway's token
        except FileExistsError:
            return _read_token(path)
    finally:
        os.unlink(temporary)
    return token


def _read_token(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise GatewayAccessError(f"cannot read the gateway's token {path}: {exc.strerror}; "
                                 "remove it so a new one is made") from None
    with os.fdopen(fd, encoding="ascii", errors="replace") as source:
        status = os.fstat(source.fileno())
        if status.st_uid != os.getuid() or status.st_mode & 0o077:
            raise GatewayAccessError(
                f"{path} is readable by others (mode {status.st_mode & 0o777:o}) or not "
                "yours, so its token may be known: remove it, and a new one is made")
        token = source.read().strip()
    if len(token) < MIN_TOKEN_CHARS:
        raise GatewayAccessError(f"{path} holds no usable token; remove it so a new one is "
                                 "made")
    return token


def gateway_user() -> str:
    """Who the gateway's one token stands for: the user running ``plancast serve``."""
    try:
        name = getpass.getuser()
    except (OSError, KeyError):  # no name for this uid (a bare container)
        return f"uid-{os.getuid()}"
    return name if USER_NAME.fullmatch(name) else f"uid-{os.getuid()}"


def read_users(path: Path) -> dict[str, str]:
    """The users of a users file: a ``name token`` line per person (blank lines and lines
    starting with ``#`` skipped); like the token file, it must be its owner's alone (mode 0600)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise GatewayAccessError(f"cannot read the users file {path}: {exc.strerror}") from None
    with os.fdopen(fd, encoding="utf-8", errors="replace") as source:
        status = os.fstat(source.fileno())
        if status.st_uid != os.getuid() or status.st_mode & 0o077:
            raise GatewayAccessError(
                f"{path} is readable by others (mode {status.st_mode & 0o777:o}) or not "
                f"yours, so its tokens may be known: `chmod 600 {path}` and give each user "
                "a new token")
        lines = source.read().splitlines()
    users: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) != 2:
            raise GatewayAccessError(f"{path}, line {number}: write `name token` (two words)")
        name, token = fields
        if name in users:
            raise GatewayAccessError(f"{path}, line {number}: user {name} is named twice")
        users[name] = token
    if not users:
        raise GatewayAccessError(f"{path} names no user: write a `name token` line per person")
    return users
