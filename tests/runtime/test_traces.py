"""A run's events as OpenTelemetry spans: the tree, the names and attributes of the GenAI
agent conventions, times from the events; and ``plancast trace`` sending them over OTLP/HTTP
to a collector (a real HTTP server here, decoding what it receives)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from runtime.telemetry import export_run
from runtime.testing import Rule

from ..actors.harness import echo, finish, plan_line, run_team
from ..subprocesses import plancast

pytestmark = pytest.mark.anyio

ROLES = {"agent": {"model": "scripted"}}


async def test_a_runs_events_become_a_tree_of_genai_spans(nats_url: str, prefix: str) -> None:
    out = await run_team(nats_url, prefix, [
        Rule(role="planner", lines=[echo(1, "one"), plan_line(2, role="agent",
                                                                instruction="think"),
                                    plan_line(3, tool="math", args={"expression": "1/0"})]),
        Rule(role="agent", text="thought"), finish("done")],
        roles=ROLES, step_attempts=1, request={"max_replans": 0})
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    made = export_run(out.events, provider)
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert made == len(exporter.get_finished_spans()) == 5
    root = spans["invoke_workflow plancast"]
    assert set(spans) == {"invoke_workflow plancast", "plan", "execute_tool echo",
                          "invoke_agent agent", "execute_tool math"}
    assert all(s.parent is not None and s.parent.span_id == root.context.span_id
               for s in spans.values() if s is not root)
    assert root.attributes is not None and root.attributes["plancast.run_id"] == out.run_id
    assert root.attributes["gen_ai.usage.input_tokens"] > 0
    assert root.status.status_code is StatusCode.ERROR  # the run failed (step 3)
    math = spans["execute_tool math"]
    assert math.status.status_code is StatusCode.ERROR and "division by zero" in str(
        math.status.description)
    assert math.attributes is not None and math.attributes["error.type"] == "error"
    assert root.attributes["error.type"] == "no_replans"
    echo_span = spans["execute_tool echo"]
    assert echo_span.attributes is not None and echo_span.attributes["plancast.output"] == "one"
    assert echo_span.start_time is not None and root.start_time is not None
    assert root.start_time <= echo_span.start_time  # times come from the events
    assert root.end_time == int(out.events[-1].ts * 1e9)


async def test_plancast_trace_sends_the_spans_to_a_collector(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    out = await run_team(nats_url, prefix, [Rule(role="planner", lines=[echo(1, "one")]),
                                            finish("done")])
    received: list[ExportTraceServiceRequest] = []
    async with _collector(received) as url:
        result = await plancast("trace", out.run_id, "--otlp", url, "--nats", nats_url,
                                "--prefix", prefix, cwd=tmp_path)
    assert result.returncode == 0, result.stderr.decode()
    names = [span.name for request in received for rs in request.resource_spans
             for ss in rs.scope_spans for span in ss.spans]
    assert sorted(names) == ["execute_tool echo", "invoke_workflow plancast", "plan"]
    assert "sent 3 spans" in result.stderr.decode()


class _collector:
    """An OTLP/HTTP endpoint on a free port that keeps every export request it gets."""

    def __init__(self, received: list[ExportTraceServiceRequest]) -> None:
        self.received = received

    async def __aenter__(self) -> str:
        self.listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = self.listener.extra(anyio.abc.SocketAttribute.local_port)
        self.tg = anyio.create_task_group()
        await self.tg.__aenter__()
        self.tg.start_soon(self.listener.serve, self._handle)
        return f"http://127.0.0.1:{port}/v1/traces"

    async def __aexit__(self, *exc: Any) -> None:
        self.tg.cancel_scope.cancel()
        await self.tg.__aexit__(None, None, None)
        await self.listener.aclose()

    async def _handle(self, stream: anyio.abc.SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                data += await stream.receive()
            head, _, body = data.partition(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length"))
            while len(body) < length:
                body += await stream.receive()
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            self.received.append(request)
            await stream.send(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\n"
                              b"Content-Length: 0\r\nConnection: close\r\n\r\n")
