"""Client pings fast enough to notice a connection that went silent in a partition.

nats-py pings every two minutes by default, so a client whose TCP path to its node was
cut keeps waiting on it long after the cluster moved on. plancast's settings have no ping
option yet; until they do, test processes set nats-py's ``ping_interval`` and
``max_outstanding_pings`` by wrapping ``runtime.connection._connect_options``. Once
``Settings`` grows a ``ping_interval`` field this steps aside (the environment's
``PLANCAST_PING_INTERVAL`` then does the job).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from runtime import connection
from runtime.settings import Settings

ENV = "PLANCAST_TEST_PINGS"
"""``<interval seconds>,<max outstanding pings>`` for test processes (the runner reads it)."""


def settings_ping_support() -> bool:
    return "ping_interval" in Settings.model_fields


@contextmanager
def fast_pings(interval: float, outstanding: int) -> Iterator[None]:
    """Connections opened in this block ping every ``interval`` seconds."""
    original = getattr(connection, "_connect_options", None)
    if settings_ping_support() or original is None:
        yield
        return

    def options(settings: Settings) -> dict[str, Any]:
        return {**original(settings), "ping_interval": interval,
                "max_outstanding_pings": outstanding}

    connection._connect_options = options
    try:
        yield
    finally:
        connection._connect_options = original


@contextmanager
def pings_from_env() -> Iterator[None]:
    value = os.environ.get(ENV)
    if not value:
        yield
        return
    interval, outstanding = value.split(",")
    with fast_pings(float(interval), int(outstanding)):
        yield
