"""A scripted model server as a program: serve a scenario until Ctrl-C or SIGTERM.

Shared by ``plancast scripted-model`` and ``python -m runtime.testing.scripted_model``, so
both stop the same way and say the same thing.
"""

from __future__ import annotations

import signal
from collections.abc import Callable

import anyio

from ._scenario import Scenario
from ._server import ScriptedModelServer, open_scripted_model_server


def scripted_banner(server: ScriptedModelServer, source: str) -> list[str]:
    """What a started server says: that it is scripted, and the URL to put in a team file."""
    return [
        f"plancast SCRIPTED model (not a real model), scenario {source}",
        f"OpenAI-compatible API at {server.base_url}",
        f'  in a team file: [models.NAME] base_url = "{server.base_url}" (no key needed)',
        "  Ctrl-C stops it",
    ]


async def serve_until_stopped(
    scenario: Scenario,
    *,
    host: str,
    port: int,
    time_scale: float | None = None,
    log: Callable[[str], None] | None = None,
    ready: Callable[[ScriptedModelServer], None] = lambda server: None,
) -> str:
    """Serve ``scenario`` until SIGINT or SIGTERM; returns the signal's name.

    ``ready`` is called once the port is bound; a port that cannot be bound raises OSError.
    """
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with open_scripted_model_server(
            scenario, host=host, port=port, time_scale=time_scale, log=log
        ) as server:
            ready(server)
            async for signum in signals:
                return signal.Signals(signum).name
    raise AssertionError("the signal stream never ends")  # pragma: no cover
