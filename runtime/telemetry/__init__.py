"""Tracing: spans recorded inside the actors, one trace per run across processes, and a
run's events exported as spans. Off by default, and then nothing imports opentelemetry:
the SDK side (``Tracing``, ``export_run``: the ``otel`` extra) loads only when asked for."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .hooks import CAPTURE_CONTENT as CAPTURE_CONTENT
from .hooks import OFF as OFF
from .hooks import TRACEPARENT as TRACEPARENT
from .hooks import SpanLike as SpanLike
from .hooks import attributes as attributes
from .hooks import configure as configure
from .hooks import enabled as enabled
from .hooks import flush as flush
from .hooks import plan_span as plan_span
from .hooks import record_run as record_run
from .hooks import review_span as review_span
from .hooks import step_span as step_span
from .hooks import synthesis_span as synthesis_span
from .hooks import task_headers as task_headers
from .hooks import tool_span as tool_span
from .hooks import wanted as wanted
from .ids import run_ids as run_ids

if TYPE_CHECKING:
    from .export import export_run as export_run
    from .export import send_run as send_run
    from .sdk import Tracing as Tracing


def __getattr__(name: str) -> Any:
    """The parts that need the otel extra, imported only by whoever asks for them."""
    if name == "Tracing":
        from .sdk import Tracing

        return Tracing
    if name in ("export_run", "send_run"):
        from . import export

        return getattr(export, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = (
    "CAPTURE_CONTENT",
    "OFF",
    "TRACEPARENT",
    "SpanLike",
    "Tracing",
    "attributes",
    "configure",
    "enabled",
    "export_run",
    "flush",
    "plan_span",
    "record_run",
    "review_span",
    "run_ids",
    "send_run",
    "step_span",
    "synthesis_span",
    "task_headers",
    "tool_span",
    "wanted",
)
