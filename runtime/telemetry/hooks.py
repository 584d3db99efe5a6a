"""OpenTelemetry spans recorded inside the actors: one trace per run, across processes.

Off by default, and then nothing imports opentelemetry: each hook costs one test of a
module global. On with the standard variables (``OTEL_TRACES_EXPORTER``,
``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) or
``PLANCAST_TRACING=true``; the spans are made by ``telemetry_sdk`` (the ``otel`` extra).

A run's trace id, and the span id of its ``invoke_workflow`` span, are derived from the run
id, so any process computes them alone: a planner that adopts a run continues its trace
with nothing stored or sent, and the run's span is recorded once, by the planner that ends
the run, from the run's stored start time. Tasks a planner sends (step, review, synthesis)
carry the W3C ``traceparent`` in their NATS headers, so executor, critic and synthesizer
spans are children of the run's span wherever they run. Workers need not send or read it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol

from protocols import ReviewTask, StepTask, SynthesisTask, Usage

from ..bus import Delivery
from ..config import Settings

log = logging.getLogger(__name__)

CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""Set to ``true`` to put prompts, outputs and tool arguments into spans (off: they may be
private)."""
TRACEPARENT = "traceparent"


class SpanLike(Protocol):
    """What a hook's caller may record on its span (nothing happens while tracing is off)."""

    capture: bool
    """Whether ``content`` records anything: test it before building costly content."""

    def model(self, request: str, response: str, usage: Usage,
              finish_reasons: Sequence[str]) -> None:
        """The model calls the span made: names, token usage, why the model stopped."""

    def fail(self, error_type: str, description: str) -> None:
        """The work failed: ``error.type`` and an error status."""

    def set(self, key: str, value: str | int | float | bool) -> None:
        """One more attribute."""

    def content(self, key: str, value: str) -> None:
        """Message content: recorded only if the user opted in (``CAPTURE_CONTENT``)."""


class _Off:
    """The span of a hook while tracing is off."""

    capture = False

    def model(self, request: str, response: str, usage: Usage,
              finish_reasons: Sequence[str]) -> None:
        pass

    def fail(self, error_type: str, description: str) -> None:
        pass

    def set(self, key: str, value: str | int | float | bool) -> None:
        pass

    def content(self, key: str, value: str) -> None:
        pass


OFF: SpanLike = _Off()
_NO_SPAN: AbstractContextManager[SpanLike] = nullcontext(OFF)
"""What every span hook returns while tracing is off (reusable: it holds no state)."""
_tracing: Any = None
"""The ``telemetry_sdk.Tracing`` of this process while tracing is on; None while off."""
_configured = False


def wanted(settings: Settings, environ: Mapping[str, str] = os.environ) -> str:
    """Why tracing should be on (the setting or variable that says so), or "" for off."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true" \
            or environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return ""
    if settings.tracing:
        return "PLANCAST_TRACING"
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                 "OTEL_EXPORTER_OTLP_ENDPOINT"):
        if environ.get(name, "").strip():
            return name
    return ""


def configure(settings: Settings, *, exporter: Any = None) -> bool:
    """Turn tracing on for this process if asked (once; later calls change nothing).
    ``exporter`` replaces the one the environment names (tests). True if tracing is on."""
    global _tracing, _configured
    if _configured:
        return _tracing is not None
    _configured = True
    why = wanted(settings) or ("an exporter was given" if exporter is not None else "")
    if not why:
        return False
    try:
        from . import sdk as telemetry_sdk
    except ImportError:
        log.warning("tracing is on (%s) but the otel extra is missing: pip install "
                    "'plancast[otel]', or unset %s; running without traces", why, why)
        return False
    try:
        _tracing = telemetry_sdk.Tracing(exporter, capture=_capture())
    except ValueError as exc:  # an exporter or protocol we do not ship
        log.warning("tracing is off: %s", exc)
        return False
    log.info("tracing on (%s): spans go to %s", why, _tracing.destination)
    return True


def _capture() -> bool:
    return os.environ.get(CAPTURE_CONTENT, "").strip().lower() == "true"


def enabled() -> bool:
    return _tracing is not None


def task_headers(run_id: str) -> dict[str, str] | None:
    """Headers for a task of the run: ``traceparent`` (and ``tracestate``) naming the run's
    span. None while tracing is off: the task is sent exactly as before."""
    if _tracing is None:
        return None
    headers: dict[str, str] = _tracing.headers(run_id)
    return headers


def step_span(delivery: Delivery, task: StepTask, *, role: str,
              executor: str) -> AbstractContextManager[SpanLike]:
    """The span of a step an executor runs: ``execute_tool <tool>`` for a tool step,
    ``invoke_agent <role>`` for one its model does; a child of the span the task's
    ``traceparent`` names (a trace of its own without one)."""
    if _tracing is None:
        return _NO_SPAN
    tool = task.step.tool
    return _work(delivery, ("execute_tool", tool) if tool is not None else ("invoke_agent", role),
                 attributes(task.run_id, step_id=task.step.id, attempt=task.attempt,
                            executor=executor))


def review_span(delivery: Delivery, task: ReviewTask, *,
                role: str) -> AbstractContextManager[SpanLike]:
    """The span of the critic's review of a step's output (``invoke_agent <role>``)."""
    if _tracing is None:
        return _NO_SPAN
    return _work(delivery, ("invoke_agent", role),
                 attributes(task.run_id, step_id=task.step.id, attempt=task.attempt))


def synthesis_span(delivery: Delivery, task: SynthesisTask, *,
                   role: str) -> AbstractContextManager[SpanLike]:
    """The span of the synthesizer joining a round (``invoke_agent <role>``)."""
    if _tracing is None:
        return _NO_SPAN
    return _work(delivery, ("invoke_agent", role),
                 attributes(task.run_id, round=task.plan.round))


def _work(delivery: Delivery, operation: tuple[str, str],
          attrs: Mapping[str, Any]) -> AbstractContextManager[SpanLike]:
    span: AbstractContextManager[SpanLike] = _tracing.work_span(delivery.headers, *operation,
                                                                attrs)
    return span


def plan_span(run_id: str, role: str, round_: int,
              attempt: int) -> AbstractContextManager[SpanLike]:
    """The span of one plan attempt (``plan``), a child of the run's span."""
    if _tracing is None:
        return _NO_SPAN
    span: AbstractContextManager[SpanLike] = _tracing.plan_span(
        run_id, {"gen_ai.agent.name": role, **attributes(run_id, round=round_, attempt=attempt)})
    return span


def tool_span(name: str, call_id: str, arguments: str) -> AbstractContextManager[SpanLike]:
    """The span of a tool call a model asked for, a child of the current span."""
    if _tracing is None:
        return _NO_SPAN
    span: AbstractContextManager[SpanLike] = _tracing.tool_span(name, call_id, arguments)
    return span


def record_run(run_id: str, *, goal: str, started_at: float, usage: Usage,
               error_type: str = "", description: str = "") -> None:
    """The run ended: its ``invoke_workflow`` span, from its start to now."""
    if _tracing is not None:
        _tracing.record_run(run_id, goal=goal, started_at=started_at, usage=usage,
                            error_type=error_type, description=description)


def flush(timeout: float = 5.0) -> None:
    """Export the spans made so far (blocking: call it off the event loop)."""
    if _tracing is not None:
        _tracing.flush(timeout)


def attributes(run_id: str, **more: str | int | float | bool) -> dict[str, Any]:
    """A span's attributes: those every span of a run carries, and ``more``."""
    return {"gen_ai.conversation.id": run_id, "plancast.run_id": run_id,
            **{f"plancast.{k}": v for k, v in more.items()}}
