"""Run a whole team in-process against the shared nats-server and a scripted model.

A test writes the model's answers as scenario rules, runs one goal, and gets back every
event of the run (checked for gap-free order and identical replay) and the model
server's request log, so it can assert on what happened and in which order.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import anyio
import anyio.abc
import msgspec
from rich.console import Console

from protocols import (
    RunEvent,
    RunFailed,
    RunFinished,
    RunRequest,
    Step,
    StepClaimed,
    StepDispatched,
    StepFinished,
    StepOutcomes,
    StepPlanned,
    StepResult,
    Verb,
    decoder_for,
    subject,
)
from runtime.bus import Bus
from runtime.cli import RunView
from runtime.client import follow, submit
from runtime.config import Settings, TeamConfig, team_from_dict
from runtime.nonces import Nonces
from runtime.testing import RecordedRequest, Rejection, Rule, Scenario, open_scripted_model_server
from runtime.tools import ToolRegistry, builtin_tools
from runtime.worker import open_deployment

from ..invariants import event_log_violations

E = TypeVar("E")

RUN_TIMEOUT = 60.0
"""A guard against a hung run (the test fails instead of waiting for pytest's timeout)."""

NONCES = Nonces("")
"""The nonces of a planner with no secret (as in these tests): a test that forges an
answer with them plays an executor that received the task, to test what is checked next."""

WORKER_TOOLS = ["echo", "math", "sleep", "python"]


def plan_line(id: int, role: str = "worker", **fields: Any) -> str:
    """One JSONL plan line, as the planner's model writes it."""
    return msgspec.json.encode(Step(id=id, role=role, **fields)).decode()


def echo(id: int, text: str, **fields: Any) -> str:
    """A tool step that needs no model: echo ``text`` (``$N`` allowed)."""
    return plan_line(id, tool="echo", args={"text": text}, **fields)


def finish(answer: str, **fields: Any) -> Rule:
    """The synthesizer finishes with ``answer``."""
    return Rule(role="synthesizer", text=json.dumps({"action": "finish", "answer": answer}),
                **fields)


def make_team(base_url: str, roles: dict[str, Any] | None = None, *,
              model: dict[str, Any] | None = None,
              presets: dict[str, dict[str, Any]] | None = None,
              tool_config: dict[str, Any] | None = None, **policy: Any) -> TeamConfig:
    """Planner, a tool-only ``worker``, a synthesizer, plus ``roles``; all on the scripted
    model (its preset ``scripted`` extended with ``model``; ``presets`` are more presets of
    the same server for ``roles`` to name)."""
    scripted = {"model": "scripted-model", "base_url": base_url, "max_retries": 0}
    data: dict[str, Any] = {
        "models": {"scripted": {**scripted, **(model or {})},
                   **{name: {**scripted, **extra} for name, extra in (presets or {}).items()}},
        "roles": {
            "planner": {"kind": "planner", "model": "scripted"},
            "worker": {"description": "runs tools", "tools": WORKER_TOOLS,
                       "tool_steps_only": True, "concurrency": 16},
            "synthesizer": {"kind": "synthesizer", "model": "scripted"},
            **(roles or {}),
        },
        **policy,
    }
    if tool_config:  # the team file's [tools.NAME] tables
        data["tools"] = tool_config
    return team_from_dict(data, source="test team")


@dataclass
class Outcome:
    """Everything one run left behind."""

    run_id: str
    events: list[RunEvent]
    requests: list[RecordedRequest]

    def of(self, kind: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, kind)]

    def first(self, kind: type[E], where: Callable[[E], bool] = lambda _: True) -> E:
        found = [e for e in self.of(kind) if where(e)]
        assert found, f"no {kind.__name__} matching in {self.summary()}"
        return found[0]

    def seq(self, kind: type[Any], where: Callable[[Any], bool] = lambda _: True) -> int:
        """The sequence number of the first event of ``kind`` that matches."""
        return int(self.first(kind, where).seq)

    def dispatched(self, step_id: int) -> list[StepDispatched]:
        return [e for e in self.of(StepDispatched) if e.step_id == step_id]

    def finished(self, step_id: int) -> StepFinished:
        return self.first(StepFinished, lambda e: e.step_id == step_id)

    def planned(self) -> dict[int, Step]:
        return {e.step.id: e.step for e in self.of(StepPlanned)}

    @property
    def outcome(self) -> RunEvent:
        return self.events[-1]

    @property
    def answer(self) -> str:
        last = self.events[-1]
        assert isinstance(last, RunFinished), f"the run did not finish: {self.summary()}"
        return last.answer

    @property
    def failure(self) -> RunFailed:
        last = self.events[-1]
        assert isinstance(last, RunFailed), f"the run did not fail: {self.summary()}"
        return last

    def by_role(self, role: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.headers.get("x-plancast-role") == role]

    def summary(self) -> str:
        return "\n" + "\n".join(f"  {e.seq:3} {_describe(e)}" for e in self.events)


def _describe(event: RunEvent) -> str:
    text = repr(event)
    return text if len(text) < 220 else text[:220] + "..."


def last_user_message(request: RecordedRequest) -> str:
    users = [m for m in request.body["messages"] if m.get("role") == "user"]
    content = users[-1]["content"] if users else ""
    return content if isinstance(content, str) else str(content)


def check_sequence(events: Sequence[RunEvent]) -> None:
    """Events are numbered 1..n with no gap, in order, only the last one is terminal, and
    the log keeps every rule of ``tests.invariants``."""
    listing = "\n".join(f"  {e.seq:3} {_describe(e)}" for e in events)
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), listing
    terminal = [isinstance(e, RunFinished | RunFailed) for e in events]
    assert terminal == [False] * (len(events) - 1) + [True], listing
    assert event_log_violations(events) == [], listing


OUTCOMES = decoder_for(StepClaimed | StepResult | StepOutcomes)


async def _record_outcomes(bus: Bus, seen: list[object], *,
                           task_status: anyio.abc.TaskStatus[None]) -> None:
    """Record every claim, result and batch of them sent under the test's prefix, as sent
    (core NATS sees the stream's input); subscribed before the run is submitted, so a
    step that ends at once is not missed."""
    sub = await bus.nc.subscribe(subject(bus.prefix, Verb.RESULT, ">", wildcard=True))
    await bus.nc.flush()
    task_status.started()
    async for msg in sub.messages:
        try:
            seen.append(OUTCOMES.decode(msg.data))
        except Exception:  # other outcomes (the synthesizer's) are not these
            continue


async def run_team(
    nats_url: str, prefix: str, rules: Sequence[Rule], *,
    goal: str = "test goal", roles: dict[str, Any] | None = None,
    tools: ToolRegistry | None = None, planner_options: dict[str, Any] | None = None,
    request: dict[str, Any] | None = None, settings: dict[str, Any] | None = None,
    serve: list[str] | None = None, model: dict[str, Any] | None = None,
    presets: dict[str, dict[str, Any]] | None = None, rejects: Sequence[Rejection] = (),
    stream_usage: bool = True,
    during: Callable[[Bus, str], Awaitable[None]] | None = None,
    after: Callable[[Bus, str], Awaitable[None]] | None = None,
    outcomes: list[object] | None = None, model_url: str | None = None,
    tool_config: dict[str, Any] | None = None, **policy: Any,
) -> Outcome:
    """Run ``goal`` with a team answering from ``rules``; returns its events once it ended.

    ``settings`` override the deployment's, ``serve`` names the roles that get a process
    (all by default), ``model`` extends the scripted model's preset (``structured`` ...)
    and ``presets`` adds presets of the same server,
    ``rejects`` are constraints the model server refuses, ``stream_usage=False`` plays a
    model server that sends no usage in streams, ``during(bus, run_id)`` runs beside the
    run (e.g. to meddle) and ``after(bus, run_id)`` once it has ended, before the
    deployment stops (e.g. to wait for its last state), within the same deadline;
    ``outcomes`` receives every claim, result and batch of them the executors sent;
    ``model_url`` is a model server of the test's own (one it may kill), used instead of
    serving ``rules`` here (no requests are recorded then); ``tool_config`` is the team
    file's ``[tools.NAME]`` tables.
    """
    scenario = Scenario(rules=list(rules), rejects=list(rejects), stream_usage=stream_usage)
    async with contextlib.AsyncExitStack() as stack:
        server = None if model_url else \
            await stack.enter_async_context(open_scripted_model_server(scenario))
        base_url = server.base_url if server is not None else model_url or ""
        team = make_team(base_url, roles, model=model, presets=presets,
                         tool_config=tool_config, **policy)
        if planner_options:
            team.roles["planner"].options.update(planner_options)
        config = Settings(nats_url=nats_url, prefix=prefix, **(settings or {}))
        async with open_deployment(config, team, tools or builtin_tools(plugins=False),
                                   roles=serve) as bus, anyio.create_task_group() as tg:
            if outcomes is not None:
                await tg.start(partial(_record_outcomes, bus, outcomes))
            accepted = await submit(bus, RunRequest(goal=goal, **(request or {})))
            if during is not None:
                tg.start_soon(during, bus, accepted.run_id)
            with anyio.fail_after(RUN_TIMEOUT):
                events = [event async for event in follow(bus, accepted.run_id)]
                replay = [event async for event in follow(bus, accepted.run_id)]
                if after is not None:
                    await after(bus, accepted.run_id)
            tg.cancel_scope.cancel()
        requests = list(server.requests) if server else []
    check_sequence(events)
    assert replay == events, "a late subscriber must replay exactly the same events"
    view = RunView(accepted.run_id)  # the CLI's view folds any real run's events
    for event in events:
        view.apply(event)
    Console(file=io.StringIO(), width=120).print(view.render())
    assert view.outcome == events[-1]
    return Outcome(accepted.run_id, events, requests)
