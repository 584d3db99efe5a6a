"""How every command starts: settings from flags, the environment and ``.env``; the
local deployment when no ``--nats`` is given; log lines and errors on the terminal."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import typer
from dotenv import load_dotenv
from pydantic import ValidationError
from rich.console import Console
from rich.highlighter import NullHighlighter
from rich.logging import RichHandler
from rich.markup import escape

from .bus import running, secret_of
from .config import Settings
from .errors import PlancastError

console = Console()
err_console = Console(stderr=True)


def print_error(message: str) -> None:
    """One line on stderr, never wrapped (the message is not markup)."""
    err_console.print(f"[red]error:[/] {escape(message)}", soft_wrap=True)


def build_settings(nats: str | None, creds: Path | None, prefix: str | None,
                   connect_timeout: float | None = None) -> Settings:
    """Settings from the environment and ``.env``, with command-line flags on top. The
    ``.env`` file also fills the environment (without overriding it), so the model keys it
    holds (``OPENAI_API_KEY`` ...) are found as the README says."""
    load_dotenv(".env", override=False)
    overrides: dict[str, Any] = {}
    if nats:
        overrides["nats_url"] = nats
    if creds:
        overrides["creds"] = creds
    if prefix:
        overrides["prefix"] = prefix
    if connect_timeout is not None:
        overrides["connect_timeout"] = connect_timeout
    try:
        return Settings(**overrides)
    except ValidationError as exc:  # a flag, the environment or .env: one line each
        for error in exc.errors():
            where = ".".join(str(part) for part in error["loc"]) or "settings"
            print_error(f"invalid {where}: {error['msg'].removeprefix('Value error, ')}")
        raise typer.Exit(2) from None


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


class _Printable(logging.Filter):
    """Control characters from outside (a terminal escape in a refused message) are shown
    escaped, never sent to the terminal."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if _CONTROL.search(message):
            record.msg, record.args = _CONTROL.sub(lambda m: repr(m[0])[1:-1], message), ()
        return True


def setup_logging(verbose: bool, *, quiet: bool = False) -> None:
    handler = RichHandler(console=err_console, show_path=False, rich_tracebacks=False,
                          highlighter=NullHighlighter(), markup=False)
    handler.addFilter(_Printable())
    logging.basicConfig(
        level=logging.DEBUG if verbose else (logging.WARNING if quiet else logging.INFO),
        format="%(message)s",
        # Log lines carry text from outside (subjects, refusal reasons): printed as it is,
        # never highlighted or read as markup.
        handlers=[handler],
    )
    if not verbose:  # every model call would be a line (openai logs through httpx2 now)
        for chatty in ("nats", "httpx", "httpx2", "openai"):
            logging.getLogger(chatty).setLevel(logging.WARNING)


def local_deployment(settings: Settings) -> Settings:
    """Without ``--nats`` (or with the URL it printed): the deployment ``plancast up``
    runs on this machine, if any, with its secret as the token (the user passes nothing)."""
    store = settings.data_dir / "nats"
    try:
        if (url := running(store)) is None or settings.nats_url not in (None, url):
            return settings
        secret = secret_of(store)
    except PlancastError as exc:  # a URL or secret others could read or write
        if settings.nats_url:
            return settings  # not ours to use: the server named is asked as it is
        print_error(str(exc))
        raise typer.Exit(2) from None
    if not settings.nats_url:
        err_console.print(f"using the local deployment at {url} (started by plancast up; "
                          "--nats to choose another)", markup=False, highlight=False)
    return settings.model_copy(update={"nats_url": url, "token": secret})
