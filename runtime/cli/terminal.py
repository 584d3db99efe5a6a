"""Where a command's output, log lines and errors go: the terminal, through rich."""

from __future__ import annotations

import logging
import os
import re
import sys
from typing import NoReturn

from rich.console import Console
from rich.highlighter import NullHighlighter
from rich.logging import RichHandler
from rich.text import Text

# No :emoji: codes: text from a run (a goal, a model's output) is printed as it was written.
console = Console(emoji=False)
err_console = Console(stderr=True, emoji=False)


def print_error(message: str) -> None:
    """One line on stderr, never wrapped; the message is Text, never read as markup (it
    quotes config tables like ``[timeouts]`` and text from outside)."""
    err_console.print(Text.assemble(("error:", "red"), " ", message), soft_wrap=True)


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


class PrintableLogFilter(logging.Filter):
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
    handler.addFilter(PrintableLogFilter())
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


def reader_gone() -> NoReturn:
    """Whoever read our output stopped (``plancast run --json … | head -1``): end quietly."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
    raise SystemExit(0)
