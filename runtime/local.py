"""The embedded deployment on this machine: found, never started twice on one store.

The process that runs an embedded nats-server holds an exclusive lock on its store
(``<data dir>/nats/deployment.lock``) and writes the server's URL beside it. A later
command without ``--nats`` finds the lock held and joins that server; a second embedded
server on a held store is refused, instead of sharing (and corrupting) its JetStream data.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import PlancastError

LOCK, URL = "deployment.lock", "deployment.url"


class StoreInUse(PlancastError):
    """Another process runs (or is starting) an embedded server on this store."""


@contextmanager
def holding(store: Path) -> Iterator[Path]:
    """Hold the store's lock while an embedded server runs on it; yields where to write
    the server's URL once it is up."""
    store.mkdir(parents=True, exist_ok=True)
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
        os.close(fd)  # releases the lock


def running(store: Path) -> str | None:
    """The URL of the embedded server another process runs on ``store``, if any."""
    try:
        fd = os.open(store / LOCK, os.O_RDWR)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:  # held: a server runs there (or is starting)
        try:
            return (store / URL).read_text().strip() or None
        except OSError:
            return None
    finally:
        os.close(fd)
    return None
