"""When a run's plan call and the tasks its plan dispatches go out.

A plan's lines that come in one read (or a given plan's steps) are handled one after the
other in one event-loop turn, and what the planner publishes is written when the turn
ends. The round's first task must not wait for the rest: an observer with its own
thread, connection and event loop (so the planner's busy loop cannot hold it up) sees it
arrive before the planner has planned the last step. And a fresh run's plan call does
not wait for its state to be saved first.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time

import anyio
import msgspec
import nats
import pytest

from actors.run import RunStore
from protocols import Step, StepPlanned
from runtime.testing import Rule, ScriptedModelServer

from .harness import echo, finish, run_team

pytestmark = pytest.mark.anyio

LINES = 1000
"""Planning the lines after the first takes about 20 ms here: far more than the observer
needs to see a message."""


class Observer(threading.Thread):
    """Notes when the first message on ``subject`` reaches a connection of its own."""

    def __init__(self, url: str, subject: str) -> None:
        super().__init__(daemon=True)
        self.url, self.subject = url, subject
        self.first = 0.0
        self.ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._done: asyncio.Event | None = None

    def run(self) -> None:
        asyncio.run(self._watch())

    def stop(self) -> None:
        if self._loop is not None and self._done is not None:
            self._loop.call_soon_threadsafe(self._done.set)
        self.join(10)

    async def _watch(self) -> None:
        self._loop, self._done = asyncio.get_running_loop(), asyncio.Event()
        nc = await nats.connect(self.url)

        async def seen(msg: object) -> None:
            self.first = self.first or time.time()
        await nc.subscribe(self.subject, cb=seen)
        await nc.flush()
        self.ready.set()
        await self._done.wait()
        await nc.close()


@pytest.mark.parametrize("given", [False, True], ids=["streamed", "given"])
async def test_the_first_task_of_a_plan_read_at_once_is_sent_before_the_rest_is_planned(
    nats_url: str, prefix: str, given: bool,
) -> None:
    lines = [echo(1, "first"), *(echo(i, "$1") for i in range(2, LINES + 1))]
    request: dict[str, object] = {"max_steps": LINES}
    rules = [finish("done")]
    if given:  # a saved plan: no model call, every step accepted in one go
        request["plan"] = [msgspec.json.decode(line, type=Step) for line in lines]
    else:
        rules.insert(0, Rule(role="planner", lines=["\n".join(lines)]))
    observer = Observer(nats_url, f"{prefix}.step.>")
    observer.start()
    assert observer.ready.wait(10), "the observer could not subscribe"
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)  # the observer's thread runs while the planner is busy
    try:
        out = await run_team(nats_url, prefix, rules, request=request)
    finally:
        sys.setswitchinterval(switch)
        observer.stop()
    assert out.answer == "done"
    last_planned = out.first(StepPlanned, lambda e: e.step.id == LINES).ts
    assert 0 < observer.first < last_planned, (
        f"step 1's task reached the server {observer.first - last_planned:+.4f}s after the "
        f"plan's line {LINES} was planned")


async def test_a_fresh_runs_plan_call_does_not_wait_for_its_first_save(
    nats_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The run's first state write is held until the model has the plan request (5 s at
    most): the request must get there meanwhile. Saved first, as before, it waited out the
    5 s and came after."""
    asked = anyio.Event()
    first_write: list[bool] = []
    chat, write = ScriptedModelServer._chat, RunStore.write

    async def note_chat(self: ScriptedModelServer, *args: object) -> None:
        asked.set()
        await chat(self, *args)  # type: ignore[arg-type]

    async def held_write(self: RunStore, *args: object) -> None:
        if not first_write:
            first_write.append(False)
            with anyio.move_on_after(5):
                await asked.wait()
            first_write[0] = asked.is_set()
        await write(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(ScriptedModelServer, "_chat", note_chat)
    monkeypatch.setattr(RunStore, "write", held_write)
    out = await run_team(nats_url, prefix, [Rule(role="planner", lines=[echo(1, "hi")]),
                                            finish("done")])
    assert out.answer == "done"
    assert first_write == [True], "the plan request waited for the run's first save"
