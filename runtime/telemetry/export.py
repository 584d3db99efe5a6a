"""A run's events as OpenTelemetry spans, after the GenAI agent conventions.

The events already say when each thing started and ended, on every machine, so a trace is
derived from them rather than recorded inside the actors: one ``invoke_workflow`` span for
the run, a ``plan`` span per plan attempt, and per step attempt an ``execute_tool`` span (tool
steps) or an ``invoke_agent`` span (steps a role's model does), with critic verdicts,
replans and refusals as span events. Needs the ``otel`` extra.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Span, Status, StatusCode, set_span_in_context

from protocols import (
    CriticVerdict,
    OutcomeRefused,
    PlanFinished,
    PlanRejected,
    PlanStarted,
    ReplanStarted,
    RunEvent,
    RunFailed,
    RunFinished,
    RunStarted,
    Step,
    StepDispatched,
    StepFailed,
    StepFinished,
    StepPlanned,
    StepReviewing,
    StepStarted,
)

TEXT_LIMIT = 500
"""Longest goal, output or error put into an attribute."""


def _ns(ts: float) -> int:
    return int(ts * 1e9)


def export_run(events: Sequence[RunEvent], provider: TracerProvider) -> int:
    """Turn one run's events (from its first) into spans on ``provider``; returns how many
    spans were made. Spans still open at the last event end there."""
    tracer = provider.get_tracer("plancast")
    if not events or not isinstance(events[0], RunStarted):
        raise ValueError("a trace starts at the run's first event (event.run.started)")
    first: RunStarted = events[0]
    root: Any = tracer.start_span(
        "invoke_workflow plancast", start_time=_ns(first.ts), attributes={
            "gen_ai.operation.name": "invoke_workflow", "gen_ai.agent.name": "plancast",
            "plancast.run_id": first.run_id, "plancast.goal": first.goal[:TEXT_LIMIT],
            "plancast.planner": first.planner})
    parent = set_span_in_context(root)
    steps: dict[int, Step] = {}
    open_spans: dict[Any, Span] = {}
    made = 1

    def start(key: Any, name: str, ts: float, attributes: dict[str, Any]) -> None:
        nonlocal made
        open_spans[key] = tracer.start_span(name, context=parent, start_time=_ns(ts),
                                            attributes=attributes)
        made += 1

    def end(key: Any, ts: float, error: str = "", error_type: str = "") -> Span | None:
        span = open_spans.pop(key, None)
        if span is not None:
            if error:
                span.set_status(Status(StatusCode.ERROR, error[:TEXT_LIMIT]))
                span.set_attribute("error.type", error_type or "error")
            span.end(end_time=_ns(ts))
        return span

    for event in events[1:]:
        match event:
            case PlanStarted():
                start("plan", "plan", event.ts, {"gen_ai.operation.name": "plan",
                                                 "plancast.round": event.round,
                                                 "gen_ai.request.model": event.model})
            case PlanFinished():
                end("plan", event.ts)
            case PlanRejected():
                end("plan", event.ts, f"plan rejected: {event.error}", "plan_rejected")
            case StepPlanned():
                steps[event.step.id] = event.step
            case StepDispatched():
                step = steps.get(event.step_id)
                tool = step.tool if step is not None else None
                name = f"execute_tool {tool}" if tool else f"invoke_agent {event.role}"
                start(("step", event.step_id), name, event.ts, {
                    "gen_ai.operation.name": "execute_tool" if tool else "invoke_agent",
                    **({"gen_ai.tool.name": tool} if tool else
                       {"gen_ai.agent.name": event.role}),
                    "plancast.step_id": event.step_id, "plancast.attempt": event.attempt,
                    "plancast.role": event.role})
            case StepStarted():
                span = open_spans.get(("step", event.step_id))
                if span is not None:
                    span.set_attribute("plancast.executor", event.executor)
                    span.add_event("claimed", {"plancast.executor": event.executor},
                                   timestamp=_ns(event.ts))
            case StepFinished():
                span = open_spans.get(("step", event.step_id))
                if span is not None:
                    span.set_attribute("plancast.output", event.output[:TEXT_LIMIT])
                end(("step", event.step_id), event.ts)
            case StepFailed():
                end(("step", event.step_id), event.ts, event.error, event.cause)
            case StepReviewing():
                span = open_spans.get(("step", event.step_id))
                if span is not None:
                    span.add_event("under review", timestamp=_ns(event.ts))
            case CriticVerdict():
                target = open_spans.get(("step", event.step_id)) or root
                target.add_event("critic verdict", {
                    "plancast.approved": event.approved,
                    "plancast.critique": event.critique[:TEXT_LIMIT]}, timestamp=_ns(event.ts))
            case ReplanStarted():
                root.add_event("replan", {"plancast.round": event.round,
                                          "plancast.reason": event.reason[:TEXT_LIMIT]},
                               timestamp=_ns(event.ts))
            case OutcomeRefused():
                root.add_event("outcome refused", {"plancast.kind": event.kind,
                                                   "plancast.reason": event.reason[:TEXT_LIMIT]},
                               timestamp=_ns(event.ts))
            case RunFinished() | RunFailed():
                root.set_attributes({"gen_ai.usage.input_tokens": event.usage.prompt_tokens,
                                     "gen_ai.usage.output_tokens": event.usage.completion_tokens,
                                     "plancast.cost_usd": event.usage.cost_usd,
                                     "plancast.usage.estimated": event.usage.estimated})
                if isinstance(event, RunFailed):
                    root.set_status(Status(StatusCode.ERROR, event.reason[:TEXT_LIMIT]))
                    root.set_attribute("error.type", event.cause or event.stage)
    last = events[-1].ts
    for key in list(open_spans):
        end(key, last)
    root.end(end_time=_ns(last))
    return made


def send_run(events: Sequence[RunEvent], endpoint: str) -> int:
    """Send a run's spans to the OTLP/HTTP collector at ``endpoint``; how many were sent."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "plancast"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint,
                                                                      timeout=10)))
    made = export_run(events, provider)
    provider.shutdown()
    return made
