"""The spans of ``telemetry``, made with the OpenTelemetry SDK (the ``otel`` extra).

Imported only once tracing is on. The exporter follows the standard variables: OTLP over
HTTP (``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT``, headers, timeouts as the exporter reads
them) unless ``OTEL_TRACES_EXPORTER`` says ``console``; the sampler follows
``OTEL_TRACES_SAMPLER``, the resource ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags

from protocols import Usage

from .ids import run_ids

TEXT_LIMIT = 500
"""Longest error description (or goal) put into an attribute."""
_PINNED: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "plancast_pinned_ids", default=None)


class _RunIds(RandomIdGenerator):
    """Random ids, except for a run's own span: those come from the run id (``run_ids``)."""

    def generate_span_id(self) -> int:
        pinned = _PINNED.get()
        return pinned[1] if pinned else super().generate_span_id()

    def generate_trace_id(self) -> int:
        pinned = _PINNED.get()
        return pinned[0] if pinned else super().generate_trace_id()


def _exporter() -> tuple[SpanExporter, str]:
    """The exporter the environment names, and where its spans go."""
    kinds = {k.strip().lower() for k in os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")}
    if kinds == {"console"}:
        return ConsoleSpanExporter(), "the console"
    if kinds != {"otlp"}:
        raise ValueError(f"OTEL_TRACES_EXPORTER={','.join(sorted(kinds))} is not one plancast "
                         "ships; use otlp (OTLP over HTTP) or console")
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") \
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    if protocol != "http/protobuf":
        raise ValueError(f"OTLP protocol {protocol!r} is not shipped; plancast sends "
                         "http/protobuf (port 4318): set OTEL_EXPORTER_OTLP_PROTOCOL to it")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    exporter = OTLPSpanExporter()
    return exporter, str(getattr(exporter, "_endpoint", "OTLP/HTTP"))


def _resource() -> Resource:
    named = os.environ.get("OTEL_SERVICE_NAME") \
        or "service.name=" in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    return Resource.create({} if named else {"service.name": "plancast"})


class Span:
    """One recording span, with the GenAI attributes ``telemetry.SpanLike`` names."""

    def __init__(self, span: trace.Span, capture: bool) -> None:
        self._span = span
        self.capture = capture
        self.failed = False

    def model(self, request: str, response: str, usage: Usage,
              finish_reasons: Sequence[str]) -> None:
        self._span.set_attributes({
            "gen_ai.provider.name": "openai", "gen_ai.request.model": request,
            "gen_ai.response.model": response or request,
            "gen_ai.usage.input_tokens": usage.prompt_tokens,
            "gen_ai.usage.output_tokens": usage.completion_tokens,
            "gen_ai.response.finish_reasons": [r for r in finish_reasons if r]})
        if usage.cost_usd:
            self._span.set_attribute("plancast.cost_usd", usage.cost_usd)

    def fail(self, error_type: str, description: str) -> None:
        self.failed = True
        self._span.set_status(Status(StatusCode.ERROR, description[:TEXT_LIMIT]))
        self._span.set_attribute("error.type", error_type or "error")

    def set(self, key: str, value: str | int | float | bool) -> None:
        self._span.set_attribute(key, value)

    def content(self, key: str, value: str) -> None:
        if self.capture:
            self._span.set_attribute(key, value)


class Tracing:
    """This process's tracer provider and the spans plancast makes with it."""

    def __init__(self, exporter: SpanExporter | None, *, capture: bool) -> None:
        self.destination = "the given exporter"
        if exporter is None:
            exporter, self.destination = _exporter()
        self.capture = capture
        self.provider = TracerProvider(resource=_resource(), id_generator=_RunIds())
        self.provider.add_span_processor(BatchSpanProcessor(exporter))
        if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            trace.set_tracer_provider(self.provider)  # other instrumentation joins our trace
        self.tracer = self.provider.get_tracer("plancast")

    def _run_context(self, run_id: str) -> Context:
        """A context whose parent is the run's span (recorded, or to be, by its planner)."""
        trace_id, span_id = run_ids(run_id)
        decision = self.provider.sampler.should_sample(
            None, trace_id, "invoke_workflow plancast").decision
        sampled = decision is Decision.RECORD_AND_SAMPLE
        span = NonRecordingSpan(SpanContext(
            trace_id, span_id, is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)))
        return trace.set_span_in_context(span)

    def headers(self, run_id: str) -> dict[str, str]:
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=self._run_context(run_id))
        return carrier

    @contextmanager
    def _span(self, name: str, parent: Context | None,
              attributes: Mapping[str, Any]) -> Iterator[Span]:
        with self.tracer.start_as_current_span(name, context=parent,
                                               attributes=dict(attributes)) as span:
            wrapped = Span(span, self.capture)
            try:
                yield wrapped
            except Exception as exc:
                if not wrapped.failed:  # the caller knows better what went wrong
                    wrapped.fail(type(exc).__name__, str(exc))
                raise

    def work_span(self, headers: Mapping[str, str], operation: str, name: str,
                  attributes: Mapping[str, Any]) -> Any:
        carrier = {k.lower(): v for k, v in headers.items()}  # any client's spelling
        named = "gen_ai.tool.name" if operation == "execute_tool" else "gen_ai.agent.name"
        return self._span(f"{operation} {name}", propagate.extract(carrier),
                          {"gen_ai.operation.name": operation, named: name, **attributes})

    def plan_span(self, run_id: str, attributes: Mapping[str, Any]) -> Any:
        return self._span("plan", self._run_context(run_id),
                          {"gen_ai.operation.name": "plan", **attributes})

    @contextmanager
    def tool_span(self, name: str, call_id: str, arguments: str) -> Iterator[Span]:
        with self._span(f"execute_tool {name}", None, {
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": call_id, "gen_ai.tool.type": "function"}) as span:
            span.content("gen_ai.tool.call.arguments", arguments)
            yield span

    def record_run(self, run_id: str, *, goal: str, started_at: float, usage: Usage,
                   error_type: str, description: str) -> None:
        token = _PINNED.set(run_ids(run_id))
        try:
            span = self.tracer.start_span(
                "invoke_workflow plancast", context=Context(), start_time=int(started_at * 1e9),
                attributes={"gen_ai.operation.name": "invoke_workflow",
                            "gen_ai.agent.name": "plancast", "gen_ai.conversation.id": run_id,
                            "plancast.run_id": run_id,
                            "gen_ai.usage.input_tokens": usage.prompt_tokens,
                            "gen_ai.usage.output_tokens": usage.completion_tokens,
                            "plancast.cost_usd": usage.cost_usd})
        finally:
            _PINNED.reset(token)
        wrapped = Span(span, self.capture)
        wrapped.content("plancast.goal", goal[:TEXT_LIMIT])
        if error_type:
            wrapped.fail(error_type, description)
        span.end()

    def flush(self, timeout: float) -> None:
        self.provider.force_flush(int(timeout * 1000))
