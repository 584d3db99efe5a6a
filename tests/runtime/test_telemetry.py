"""Spans recorded inside the actors: one trace across the processes of a run.

The planner, the executors and the critic with the synthesizer run in three real
processes. The planner is ``plancast worker`` turned on by the standard variables
(``OTEL_EXPORTER_OTLP_ENDPOINT``: OTLP over HTTP to a collector in this test); the other two
keep their spans in the SDK's in-memory exporter and write them out when they stop.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from protocols import (
    PlanFinished,
    RunFailed,
    RunRequest,
    RunResumed,
    RunStarted,
    StepStarted,
    Verb,
    subject,
)
from runtime import telemetry
from runtime.bus import Bus, open_bus
from runtime.client import submit
from runtime.config import Settings
from runtime.testing import Rule, open_scripted_model_server, parse_scenario

from ..actors.harness import echo, finish, run_team
from ..durability.harness import env_for, following
from ..subprocesses import PLANCAST, ROOT, clean_env
from .test_traces import _collector

pytestmark = pytest.mark.anyio

CAPTURE = {telemetry.CAPTURE_CONTENT: "true"}
PLAN = [
    {"id": 1, "role": "worker", "tool": "echo", "args": {"text": "hello"}},
    {"id": 2, "role": "writer", "instruction": "divide by zero, then answer", "review": True,
     "depends_on": [1]},
]


def scenario() -> str:
    """The planner plans; the writer calls ``math`` (which fails), then answers; the critic
    approves; the synthesizer finishes."""
    return json.dumps({"rules": [
        {"role": "planner", "lines": [json.dumps(line) for line in PLAN]},
        {"role": "writer", "times": 1,
         "tool_calls": [{"name": "math", "arguments": {"expression": "1/0"}}]},
        {"role": "writer", "text": "forty-two"},
        {"role": "critic", "text": json.dumps({"approved": True, "critique": "fine"})},
        {"role": "synthesizer", "text": json.dumps({"action": "finish", "answer": "42"})},
    ]})


def team_toml(base_url: str, *, planner_model: bool = True) -> str:
    model = f'{{ model = "scripted-model", base_url = "{base_url}", max_retries = 0 }}'
    return f"""
[roles.planner]
kind = "planner"
model = {model}

[roles.worker]
tools = ["echo", "sleep", "math"]
tool_steps_only = true

[roles.writer]
description = "writes answers"
model = {model}
tools = ["math"]

[roles.critic]
kind = "critic"
model = {model}

[roles.synthesizer]
kind = "synthesizer"
model = {model}
"""


async def test_one_trace_spans_the_planner_executors_critic_and_synthesizer(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    received: list[ExportTraceServiceRequest] = []
    async with open_scripted_model_server(parse_scenario(scenario(), fmt="json")) as model, \
            _collector(received) as traces_url:
        team = tmp_path / "team.toml"
        team.write_text(team_toml(model.base_url))
        env = env_for(nats_url, prefix, tmp_path)
        otlp = {"OTEL_EXPORTER_OTLP_ENDPOINT": traces_url.removesuffix("/v1/traces"),
                "OTEL_SERVICE_NAME": "plancast-planner"}
        async with open_bus(Settings(nats_url=nats_url, prefix=prefix)) as bus, \
                _worker(bus, team, "planner", {**env, **otlp}), \
                _traced(team, "worker,writer", tmp_path / "executors.json", {**env, **CAPTURE}), \
                _traced(team, "critic,synthesizer", tmp_path / "reviewers.json", env):
            accepted = await submit(bus, RunRequest(goal="trace me"))
            async with following(bus, accepted.run_id) as events:
                finished = await events.finished()
            assert finished.answer == "42"
    run_id = accepted.run_id
    planner = _from_otlp(received)
    executors = json.loads((tmp_path / "executors.json").read_text())
    reviewers = json.loads((tmp_path / "reviewers.json").read_text())
    spans = {s["name"]: s for s in [*planner, *map(_from_json, executors),
                                    *map(_from_json, reviewers)]}
    assert sorted(spans) == ["execute_tool echo", "execute_tool math", "invoke_agent critic",
                             "invoke_agent synthesizer", "invoke_agent writer",
                             "invoke_workflow plancast", "plan"]
    # One trace: the run's id, derived from the run id in every process.
    trace_id, run_span_id = (f"{n:032x}"[-w:] for n, w in zip(telemetry.run_ids(run_id),
                                                              (32, 16), strict=True))
    assert {s["trace_id"] for s in spans.values()} == {trace_id}
    root = spans["invoke_workflow plancast"]
    assert root["span_id"] == run_span_id and root["parent_id"] is None
    # Executor, critic and synthesizer spans hang under the run's span, across processes;
    # the model's tool call hangs under the step that made it.
    for name in ("plan", "execute_tool echo", "invoke_agent writer", "invoke_agent critic",
                 "invoke_agent synthesizer"):
        assert spans[name]["parent_id"] == run_span_id, name
    assert spans["execute_tool math"]["parent_id"] == spans["invoke_agent writer"]["span_id"]
    # The GenAI attributes.
    a = {name: span["attributes"] for name, span in spans.items()}
    assert {v["gen_ai.operation.name"] for v in a.values()} == {
        "invoke_workflow", "plan", "execute_tool", "invoke_agent"}
    assert a["invoke_workflow plancast"]["gen_ai.usage.input_tokens"] > 0
    assert a["invoke_workflow plancast"]["plancast.run_id"] == run_id
    assert a["execute_tool echo"]["gen_ai.tool.name"] == "echo"
    for name in ("plan", "invoke_agent writer", "invoke_agent critic",
                 "invoke_agent synthesizer"):
        attrs = a[name]
        assert attrs["gen_ai.request.model"] == "scripted-model", name
        assert attrs["gen_ai.response.model"], name
        assert attrs["gen_ai.usage.input_tokens"] > 0 and attrs["gen_ai.usage.output_tokens"] > 0
        assert attrs["gen_ai.response.finish_reasons"][-1] == "stop", name
    assert a["invoke_agent writer"]["gen_ai.response.finish_reasons"] == ["tool_calls", "stop"]
    assert a["invoke_agent writer"]["gen_ai.agent.name"] == "writer"
    assert a["invoke_agent critic"]["plancast.approved"] is True
    # The failed tool call: error.type and an error status.
    assert a["execute_tool math"]["error.type"] == "tool_error"
    assert spans["execute_tool math"]["status"] == "ERROR"
    # Content only where the user opted in (the executors' process).
    assert "divide by zero" in a["invoke_agent writer"]["gen_ai.input.messages"]
    assert a["invoke_agent writer"]["gen_ai.output.messages"] == "forty-two"
    assert a["execute_tool math"]["gen_ai.tool.call.arguments"] == '{"expression":"1/0"}'
    assert not any(k.startswith("gen_ai.input") or k.startswith("gen_ai.output")
                   for name in ("plan", "invoke_agent critic", "invoke_workflow plancast")
                   for k in a[name])


async def test_a_planner_that_adopts_a_run_continues_its_trace(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """The first planner stops while step 1 runs; the second adopts the run, whose step 2
    then fails for good: its run span is the one the first planner's spans and the
    executor's already name, and it ends with the failure's ``error.type``."""
    plan = [{"id": 1, "role": "worker", "tool": "sleep", "args": {"seconds": 3}},
            {"id": 2, "role": "worker", "tool": "math", "args": {"expression": "1/0"},
             "depends_on": [1]}]
    rules = json.dumps({"rules": [
        {"role": "planner", "lines": [json.dumps(line) for line in plan]}]})
    async with open_scripted_model_server(parse_scenario(rules, fmt="json")) as model:
        team = tmp_path / "team.toml"
        team.write_text(team_toml(model.base_url))
        env = env_for(nats_url, prefix, tmp_path)
        async with open_bus(Settings(nats_url=nats_url, prefix=prefix)) as bus, \
                _traced(team, "worker", tmp_path / "workers.json", env):
            async with _traced(team, "planner", tmp_path / "first.json", env):
                accepted = await submit(bus, RunRequest(goal="adopt me", max_replans=0))
                async with following(bus, accepted.run_id) as events:
                    await events.until(lambda e: isinstance(e, PlanFinished))
                    await events.until(lambda e: isinstance(e, StepStarted))
            # The first planner has stopped (and written its spans); a second one adopts.
            async with _traced(team, "planner", tmp_path / "second.json", env), \
                    following(bus, accepted.run_id) as events:
                await events.until(lambda e: isinstance(e, RunFailed))
                started = events.of(RunStarted)[0]
                assert events.of(RunResumed)
    first = [_from_json(s) for s in json.loads((tmp_path / "first.json").read_text())]
    second = [_from_json(s) for s in json.loads((tmp_path / "second.json").read_text())]
    workers = [_from_json(s) for s in json.loads((tmp_path / "workers.json").read_text())]
    assert [s["name"] for s in first] == ["plan"]
    assert [s["name"] for s in second] == ["invoke_workflow plancast"]
    root = second[0]
    assert sorted(s["name"] for s in workers) == ["execute_tool math", "execute_tool math",
                                                  "execute_tool sleep"]  # two attempts
    for span in [*first, *workers]:
        assert (span["trace_id"], span["parent_id"]) == (root["trace_id"], root["span_id"])
    # The adopting planner's run span starts when the run did, under the first planner.
    assert abs(root["start"] - started.ts) < 1.0
    assert (root["status"], root["attributes"]["error.type"]) == ("ERROR", "no_replans")
    for span in workers:
        if span["name"] == "execute_tool math":
            assert (span["status"], span["attributes"]["error.type"]) == ("ERROR", "ToolError")
            assert span["attributes"]["plancast.step_id"] == 2


async def test_with_tracing_off_tasks_carry_no_traceparent(nats_url: str, prefix: str) -> None:
    headers: list[dict[str, str]] = []
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix)) as bus:
        async def tasks(msg: Any) -> None:
            headers.append(dict(msg.headers or {}))

        sub = await bus.nc.subscribe(bus.subject(Verb.STEP, "worker"), cb=tasks)
        synthesis = await bus.nc.subscribe(bus.subject(Verb.SYNTHESIS), cb=tasks)
        out = await run_team(nats_url, prefix, [Rule(role="planner", lines=[echo(1, "one")]),
                                                finish("done")])
        await bus.nc.flush()
        await sub.unsubscribe()
        await synthesis.unsubscribe()
    assert out.answer == "done"
    assert not telemetry.enabled()
    assert len(headers) == 2  # the step task and the synthesis task
    assert all("Nats-Msg-Id" in h and "traceparent" not in h for h in headers), headers


def test_the_core_never_imports_opentelemetry() -> None:
    """With tracing off, serving actors imports nothing of the otel extra."""
    code = ("import sys\n"
            "import actors.planner, actors.executor, actors.critic, actors.synthesizer\n"
            "import runtime.cli, runtime.worker\n"
            "from runtime import telemetry\n"
            "from runtime.config import Settings\n"
            "assert not telemetry.configure(Settings())\n"
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PLANCAST_"))}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                            capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


async def test_tracing_asked_for_without_the_extra_is_one_line(
    nats_url: str, prefix: str, tmp_path: Path
) -> None:
    """``plancast worker`` with tracing on but no opentelemetry to import: one line at
    start-up, then it serves as usual."""
    blocker = tmp_path / "no-otel"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\nsys.modules['opentelemetry'] = None  # as if the extra were missing\n")
    team = tmp_path / "team.toml"
    team.write_text('[roles.worker]\ntools = ["echo"]\ntool_steps_only = true\n')
    env = {**clean_env(NATS_URL=nats_url, PLANCAST_PREFIX=prefix, PLANCAST_TRACING="true",
                       PLANCAST_HEARTBEAT_INTERVAL="0.5", PYTHONPATH=str(blocker)),
           "COLUMNS": "300"}
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix)) as bus:
        beats = await bus.nc.subscribe(subject(bus.prefix, Verb.HEARTBEAT, "worker", "*",
                                               wildcard=True))
        proc = await anyio.open_process([PLANCAST, "worker", "--role", "worker", "--team",
                                         str(team)], env=env, cwd=tmp_path, stdout=None)
        try:
            for _ in range(2):  # the second comes once it serves (and handles SIGTERM)
                await beats.next_msg(timeout=30)
        finally:
            await _stopped(proc, keep_stderr=True)
    assert proc.returncode == 0
    lines = [line for line in proc.stderr_text.splitlines() if "otel" in line]
    assert len(lines) == 1, proc.stderr_text
    assert "PLANCAST_TRACING" in lines[0] and "pip install 'plancast[otel]'" in lines[0]


def test_a_tasks_trace_headers_are_untrusted_input() -> None:
    """A malformed ``traceparent`` (or an oversized ``tracestate``) from whoever published
    the task is ignored: the work gets a trace of its own, nothing raises."""
    from runtime.telemetry import Tracing

    exporter = InMemorySpanExporter()
    tracing = Tracing(exporter, capture=False)
    parent = f"00-{'ab' * 16}-{'cd' * 8}-01"
    cases = {"garbage": {"traceparent": "not a trace"},
             "zeros": {"traceparent": f"00-{'0' * 32}-{'0' * 16}-01"},
             "huge state": {"Traceparent": parent, "tracestate": "x" * 100_000},
             "none": {}}
    for name, headers in cases.items():
        with tracing.work_span(headers, "execute_tool", name, {}):
            pass
    tracing.flush(5)
    spans = {s.name: s for s in exporter.get_finished_spans()}
    for name in ("garbage", "zeros", "none"):
        assert spans[f"execute_tool {name}"].parent is None, name
    huge = spans["execute_tool huge state"]
    assert huge.parent is not None and huge.parent.span_id == int("cd" * 8, 16)
    assert huge.context is not None and len(huge.context.trace_state) == 0


# -- processes -----------------------------------------------------------------------------


@asynccontextmanager
async def _traced(team: Path, roles: str, spans: Path, env: dict[str, str],
                  ) -> AsyncIterator[Process]:
    """A runner process with in-memory spans; stopped (SIGTERM: it drains and writes its
    spans) on the way out."""
    proc = await anyio.open_process(
        [sys.executable, "-m", "tests.runtime.traced_runner", str(team), roles, str(spans)],
        env=env, cwd=ROOT, stderr=None)
    try:
        assert proc.stdout is not None
        with anyio.fail_after(30):
            line = b""
            while not line.endswith(b"\n"):
                line += await proc.stdout.receive(1)
        assert line.startswith(b"READY"), f"runner did not start: {line!r}"
        yield proc
    finally:
        await _stopped(proc)
    assert proc.returncode == 0, f"{roles} exited {proc.returncode}"


@asynccontextmanager
async def _worker(bus: Bus, team: Path, role: str, env: dict[str, str],
                  ) -> AsyncIterator[Process]:
    """``plancast worker --role ROLE``, once its second heartbeat is heard (it serves)."""
    beats = await bus.nc.subscribe(subject(bus.prefix, Verb.HEARTBEAT, role, "*",
                                           wildcard=True))
    proc = await anyio.open_process([PLANCAST, "worker", "--role", role, "--team", str(team)],
                                    env=env, cwd=ROOT, stdout=None, stderr=None)
    try:
        for _ in range(2):
            await beats.next_msg(timeout=30)
        await beats.unsubscribe()
        yield proc
    finally:
        await _stopped(proc)
    assert proc.returncode == 0, f"plancast worker exited {proc.returncode}"


async def _stopped(proc: Process, *, keep_stderr: bool = False) -> None:
    """SIGTERM (drain), then wait for the exit; SIGKILL if it does not come.
    ``keep_stderr``: what it wrote there becomes ``proc.stderr_text``."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
    with anyio.move_on_after(30):
        await proc.wait()
    if proc.returncode is None:
        proc.kill()
        await proc.wait()
    if keep_stderr and proc.stderr is not None:
        chunks = [chunk async for chunk in proc.stderr]
        proc.stderr_text = b"".join(chunks).decode()  # type: ignore[attr-defined]
    await proc.aclose()


# -- spans, from either exporter -----------------------------------------------------------


def _from_json(span: dict[str, Any]) -> dict[str, Any]:
    """A span as the SDK's ``to_json`` writes it, in this test's shape."""
    parent = span["parent_id"]
    return {"name": span["name"], "trace_id": span["context"]["trace_id"].removeprefix("0x"),
            "span_id": span["context"]["span_id"].removeprefix("0x"),
            "parent_id": parent.removeprefix("0x") if parent else None,
            "attributes": dict(span["attributes"]), "status": span["status"]["status_code"],
            "start": _seconds(span["start_time"])}


def _seconds(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _from_otlp(requests: list[ExportTraceServiceRequest]) -> list[dict[str, Any]]:
    """The spans a collector received over OTLP, in this test's shape."""
    found = []
    for request in requests:
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append({
                        "name": span.name, "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_id": span.parent_span_id.hex() or None,
                        "attributes": {kv.key: _value(kv.value) for kv in span.attributes},
                        "status": "ERROR" if span.status.code == 2 else "UNSET",
                        "start": span.start_time_unix_nano / 1e9})
    return found


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None
