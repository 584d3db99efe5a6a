"""The embedded deployment on this machine: found, never started twice on one store.

The process that runs an embedded nats-server holds an exclusive lock on its store
(``<data dir>/nats/deployment.lock``) and writes the server's URL beside it. A later
command without ``--nats`` finds the lock held and joins that server; a second embedded
server on a held store is refused, instead of sharing (and corrupting) its JetStream data.

The deployment is private: its server takes only clients that hold the store's secret
(``deployment.secret``, made once, 0600), and the store, the URL and the secret are ours
alone (0700, 0600). Another local user cannot read them, so cannot connect.

Beside the URL, the deployment says what it serves (``deployment.serves``: opaque to the
bus; the CLI records which team file, and a digest of the team), so a command given
another team can refuse instead of quietly running this one. Its port is kept
(``deployment.port``) after it stops, so a restarted deployment listens where its clients
(a ``plancast serve`` left running ...) keep reconnecting.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import InsecureFile, StoreInUse
from .private_files import create_private, private_dir, read_private, write_private

LOCK, URL, SECRET = "deployment.lock", "deployment.url", "deployment.secret"
SERVES, PORT = "deployment.serves", "deployment.port"
_SECRET_FORM = re.compile(r"[A-Za-z0-9_-]{32,}")
"""What ``secrets.token_urlsafe(32)`` makes (and nothing a config file would misread)."""


@contextmanager
def holding(store: Path) -> Iterator[Path]:
    """Hold the store's lock while an embedded server runs on it; yields where to write
    the server's URL once it is up."""
    private_dir(store)
    fd = os.open(store / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreInUse(f"another plancast process is starting a server on {store}; wait "
                         "for it and run this again, or set PLANCAST_DATA_DIR elsewhere"
                         ) from None
    try:
        yield store / URL
    finally:
        (store / URL).unlink(missing_ok=True)
        (store / SERVES).unlink(missing_ok=True)
        os.close(fd)  # releases the lock


def announce(store: Path, url: str, port: int, serves: str | None) -> None:
    """Say the server on ``store`` is up (for the process that holds its lock): what it
    serves first, then its port (kept for its next start), then its URL, which a joiner
    waits for, so one that finds the URL finds the rest."""
    if serves is None:
        (store / SERVES).unlink(missing_ok=True)  # left by a process that was killed
    else:
        write_private(store / SERVES, serves)
    write_private(store / PORT, str(port))
    write_private(store / URL, url)


def serving(store: Path) -> str | None:
    """What the deployment on ``store`` said it serves (see ``announce``); None if it said
    nothing (one of a plancast before this record, or a process that serves no team)."""
    text = (read_private(store / SERVES) or "").strip()
    return text or None


def last_port(store: Path, host: str = "127.0.0.1") -> tuple[int | None, int]:
    """The port the deployment on ``store`` listened on when it last ran, if it is free
    now (to listen there again), and the port it was (0 if it never ran here).

    A port is free if nothing listens on it: connections the last server left in
    TIME_WAIT do not count, as nats-server binds with SO_REUSEADDR too."""
    try:
        port = int((read_private(store / PORT) or "0").strip())
    except ValueError:
        return None, 0
    if not 0 < port < 65536:
        return None, 0
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return None, port
    return port, port


def running(store: Path) -> str | None:
    """The URL of the embedded server another process runs on ``store``, if any (refused
    if others could have written it)."""
    try:
        fd = os.open(store / LOCK, os.O_RDWR)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:  # held: a server runs there (or is starting)
        # Only a URL of ours (0600): we would send the secret to whatever it names.
        return (read_private(store / URL) or "").strip() or None
    finally:
        os.close(fd)
    return None


def deployment_secret(store: Path) -> str:
    """The secret of the server on ``store``, made the first time (for the process that
    holds the store's lock: see ``holding``)."""
    if (found := secret_of(store)) is not None:
        return found
    create_private(store / SECRET, secrets.token_urlsafe(32))
    made = secret_of(store)
    assert made is not None, "the secret was just made"
    return made


def secret_of(store: Path) -> str | None:
    """The secret clients of the server on ``store`` present (None: the store has none, as
    one of a plancast before private deployments). Refused if others could read it."""
    text = read_private(store / SECRET)
    if text is None:
        return None
    if not _SECRET_FORM.fullmatch(secret := text.strip()):
        raise InsecureFile(f"{store / SECRET} does not hold a plancast secret: stop the "
                           "deployment and remove it (a new one is made when it next starts)")
    return secret
