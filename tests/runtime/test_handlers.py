"""Handler tasks are reused while messages keep coming, and end once idle."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from runtime.actor import HandlerTasks

pytestmark = pytest.mark.anyio


async def test_a_task_that_finished_its_message_takes_the_next() -> None:
    seen: list[tuple[int, object]] = []
    done = anyio.Event()

    async def handle(n: int) -> None:
        seen.append((n, asyncio.current_task()))
        await anyio.lowlevel.checkpoint()
        if len(seen) == 3:
            done.set()

    async with anyio.create_task_group() as group:
        tasks = HandlerTasks(group, handle)
        for n in range(3):
            tasks.submit(n)
            await anyio.sleep(0.01)  # each one handled before the next comes
        with anyio.fail_after(5):
            await done.wait()
        group.cancel_scope.cancel()
    assert [n for n, _ in seen] == [0, 1, 2]
    assert len({task for _, task in seen}) == 1


async def test_messages_that_come_together_run_at_once_and_idle_tasks_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("runtime.actor.handlers.IDLE", 0.05)
    running, release = 0, anyio.Event()
    most = 0

    async def handle(n: int) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await release.wait()
        running -= 1

    with anyio.fail_after(5):  # the group ends once every idle task has ended on its own
        async with anyio.create_task_group() as group:
            tasks = HandlerTasks(group, handle)
            for n in range(5):
                tasks.submit(n)
            await anyio.sleep(0.01)
            assert running == 5
            release.set()
    assert most == 5
