"""The scripted OpenAI-compatible model server as a module command (the API is
``runtime.testing``; the same server is ``plancast scripted-model``).

    python -m runtime.testing.scripted_model scenario.toml --port 8000

serves a scenario to any OpenAI client (point ``OPENAI_BASE_URL`` at the printed URL).
It is labelled as a scripted model everywhere it answers: the ``x-plancast-scripted``
header, ``system_fingerprint`` and this command's output.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import anyio

from ._scenario import ScenarioError, load_scenario
from ._server import ScriptedModelServer
from ._standalone import scripted_banner, serve_until_stopped

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Serve a scenario file until interrupted; returns the process exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m runtime.testing.scripted_model",
        description="Serve a scripted (fake, offline) OpenAI-compatible model from a scenario.",
    )
    parser.add_argument("scenario", help="scenario file (.toml or .json)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (0 picks a free one)")
    parser.add_argument("--time-scale", type=float, help="multiply every scripted delay")
    parser.add_argument("--quiet", action="store_true", help="do not log each request")
    args = parser.parse_args(argv)
    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    def ready(server: ScriptedModelServer) -> None:
        print("\n".join(scripted_banner(server, args.scenario)), flush=True)

    try:
        anyio.run(lambda: serve_until_stopped(
            scenario, host=args.host, port=args.port, time_scale=args.time_scale,
            log=None if args.quiet else log, ready=ready))
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
