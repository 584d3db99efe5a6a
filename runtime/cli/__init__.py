"""The ``plancast`` command line (typer and rich live here and nowhere else in runtime):
``main`` is the console script, ``app`` the typer app (for ``typer.testing.CliRunner``),
``RunView`` the live view of a run, the ``render_*`` functions the tables it prints."""

from .commands import app as app
from .commands import main as main
from .render import render_runs as render_runs
from .render import render_status as render_status
from .terminal import PrintableLogFilter as PrintableLogFilter
from .view import RunView as RunView

__all__ = ("PrintableLogFilter", "RunView", "app", "main", "render_runs", "render_status")
