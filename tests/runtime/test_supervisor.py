"""The supervisor restarts children by strategy and restart type, backs off, escalates, and
never leaves a task or a process running behind it."""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from runtime.actor import Actor, Source
from runtime.bus import open_bus
from runtime.config import Settings
from runtime.errors import SetupError
from runtime.worker import (
    ChildExited,
    ChildSpec,
    Restart,
    Strategy,
    Supervisor,
    SupervisorEscalation,
    process_child,
)

pytestmark = pytest.mark.anyio

HANG_GUARD = 20.0
"""Seconds before a test that waits for something gives up (a guard, not an assertion)."""

Behaviour = Callable[[int], Awaitable[None]]
"""What a child does on its n-th start (1-based)."""


class Child:
    """A scripted child: records each start (and its time) and each cancellation."""

    def __init__(self, name: str, behaviour: Behaviour,
                 restart: Restart = Restart.PERMANENT) -> None:
        self.name = name
        self.behaviour = behaviour
        self.restart = restart
        self.starts: list[float] = []
        self.cancellations = 0

    @property
    def spec(self) -> ChildSpec:
        return ChildSpec(self.name, self._start, self.restart)

    async def _start(self) -> None:
        self.starts.append(anyio.current_time())
        try:
            await self.behaviour(len(self.starts))
        except anyio.get_cancelled_exc_class():
            self.cancellations += 1
            raise


class Boom(RuntimeError):
    """The crash the scripted children raise."""


async def crash(_: int) -> None:
    await anyio.lowlevel.checkpoint()
    raise Boom("crashed on purpose")


async def returns(_: int) -> None:
    await anyio.lowlevel.checkpoint()


async def forever(_: int) -> None:
    await anyio.sleep_forever()


def crash_first(then: Behaviour, times: int = 1) -> Behaviour:
    """Crash on the first ``times`` starts, then behave as ``then``."""

    async def behaviour(n: int) -> None:
        if n <= times:
            await crash(n)
        await then(n)

    return behaviour


def wait_for(event: anyio.Event) -> Behaviour:
    async def behaviour(_: int) -> None:
        await event.wait()

    return behaviour


def after(event: anyio.Event, then: Behaviour) -> Behaviour:
    """Wait for ``event``, then behave as ``then``."""

    async def behaviour(n: int) -> None:
        await event.wait()
        await then(n)

    return behaviour


def setting(event: anyio.Event, then: Behaviour | None = None) -> Behaviour:
    """Set ``event``, then behave as ``then`` (return if None)."""

    async def behaviour(n: int) -> None:
        event.set()
        if then is not None:
            await then(n)

    return behaviour


async def supervise(children: Sequence[Child], **options: Any) -> None:
    with anyio.fail_after(HANG_GUARD):
        await Supervisor([c.spec for c in children], **options).run()


# -- strategies ------------------------------------------------------------------------


async def test_one_for_one_restarts_only_the_crashed_child() -> None:
    done = anyio.Event()
    a = Child("a", crash_first(setting(done), times=2), Restart.TRANSIENT)
    b = Child("b", wait_for(done), Restart.TRANSIENT)
    await supervise([a, b], strategy=Strategy.ONE_FOR_ONE, backoff=0.01)
    assert len(a.starts) == 3
    assert len(b.starts) == 1
    assert b.cancellations == 0


async def test_one_for_all_restarts_every_child() -> None:
    done = anyio.Event()
    a = Child("a", wait_for(done), Restart.TRANSIENT)
    b = Child("b", crash_first(setting(done)), Restart.TRANSIENT)
    c = Child("c", wait_for(done), Restart.TRANSIENT)
    await supervise([a, b, c], strategy=Strategy.ONE_FOR_ALL, backoff=0.01)
    assert [len(x.starts) for x in (a, b, c)] == [2, 2, 2]
    assert a.cancellations == 1
    assert c.cancellations == 1


async def test_rest_for_one_restarts_later_siblings_only() -> None:
    done = anyio.Event()
    a = Child("a", wait_for(done), Restart.TRANSIENT)
    b = Child("b", crash_first(setting(done)), Restart.TRANSIENT)
    c = Child("c", wait_for(done), Restart.TRANSIENT)
    await supervise([a, b, c], strategy=Strategy.REST_FOR_ONE, backoff=0.01)
    assert [len(x.starts) for x in (a, b, c)] == [1, 2, 2]
    assert a.cancellations == 0
    assert c.cancellations == 1


async def test_sibling_restart_spares_temporary_and_finished_children() -> None:
    """A temporary child stopped with its siblings stays stopped; a finished one stays done."""
    finished = anyio.Event()
    temporary = Child("temporary", forever, Restart.TEMPORARY)
    done_early = Child("done-early", setting(finished), Restart.TRANSIENT)
    crasher = Child("crasher", after(finished, crash_first(returns)), Restart.TRANSIENT)
    await supervise([temporary, done_early, crasher], strategy=Strategy.ONE_FOR_ALL,
                    backoff=0.01)
    assert len(crasher.starts) == 2
    assert len(done_early.starts) == 1
    assert len(temporary.starts) == 1
    assert temporary.cancellations == 1


# -- restart types ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("restart", "first_start", "restarted"),
    [
        (Restart.PERMANENT, returns, True),
        (Restart.PERMANENT, crash, True),
        (Restart.TRANSIENT, returns, False),
        (Restart.TRANSIENT, crash, True),
        (Restart.TEMPORARY, returns, False),
        (Restart.TEMPORARY, crash, False),
    ],
    ids=["permanent-return", "permanent-crash", "transient-return", "transient-crash",
         "temporary-return", "temporary-crash"],
)
async def test_restart_type_decides_after_return_or_crash(
    restart: Restart, first_start: Behaviour, restarted: bool
) -> None:
    second_start = anyio.Event()

    async def behaviour(n: int) -> None:
        if n == 1:
            await first_start(n)
        else:
            second_start.set()
            await anyio.sleep_forever()

    child = Child("c", behaviour, restart)
    if restarted:
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(supervise, [child], backoff=0.01))
            with anyio.fail_after(HANG_GUARD):
                await second_start.wait()
            tg.cancel_scope.cancel()
        assert child.cancellations == 1  # the restarted child was stopped with the supervisor
    else:
        await supervise([child])  # returns: nothing left to supervise
    assert len(child.starts) == (2 if restarted else 1)


async def test_supervisor_returns_when_every_child_is_done_for_good() -> None:
    children = [
        Child("temporary-crash", crash, Restart.TEMPORARY),
        Child("transient-return", returns, Restart.TRANSIENT),
        Child("transient-crash-once", crash_first(returns), Restart.TRANSIENT),
    ]
    await supervise(children, backoff=0.01)
    assert [len(c.starts) for c in children] == [1, 1, 2]


async def test_supervisor_of_no_children_returns() -> None:
    await supervise([])


# -- intensity and backoff -------------------------------------------------------------


async def test_escalation_stops_every_child_before_it_is_raised() -> None:
    events: list[str] = []

    async def long_running(_: int) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            events.append("sibling stopped")

    crasher = Child("crasher", crash)
    sibling = Child("sibling", long_running)
    with pytest.raises(SupervisorEscalation, match="'crasher' stopped 3 times"):
        await supervise([crasher, sibling], max_restarts=2, backoff=0.01)
    events.append("escalated")
    assert len(crasher.starts) == 3  # the first start and two restarts
    assert len(sibling.starts) == 1
    assert sibling.cancellations == 1
    assert events == ["sibling stopped", "escalated"]


async def test_backoff_doubles_with_each_recent_restart() -> None:
    backoff = 0.05
    restarts: list[tuple[str, int, BaseException | None]] = []
    child = Child("c", crash)
    with pytest.raises(SupervisorEscalation):
        await supervise([child], max_restarts=3, backoff=backoff, period=60.0,
                        on_restart=lambda *args: restarts.append(args))
    gaps = [later - earlier for earlier, later in pairwise(child.starts)]
    assert len(gaps) == 3
    for k, gap in enumerate(gaps):
        assert gap >= backoff * 2**k - 1e-3, (k, gaps)
    assert [(name, count) for name, count, _ in restarts] == [("c", 1), ("c", 2), ("c", 3)]
    assert all(isinstance(error, Boom) for _, _, error in restarts)


async def test_restarts_outside_the_period_do_not_count() -> None:
    """Crashes farther apart than ``period`` never escalate (the child later returns)."""
    period = 0.05

    async def behaviour(n: int) -> None:
        await anyio.sleep(period * 2)  # each crash comes after the last one left the window
        if n <= 4:
            raise Boom(f"crash {n}")

    child = Child("slow-crasher", behaviour, Restart.TRANSIENT)
    await supervise([child], max_restarts=1, period=period, backoff=0.001)
    assert len(child.starts) == 5


# -- process children ------------------------------------------------------------------


async def test_failing_process_is_restarted_then_escalates(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    script = "import sys; open(sys.argv[1], 'a').write('x'); sys.exit(3)"
    spec = process_child("exit3", [sys.executable, "-c", script, str(runs)])
    restarts: list[BaseException | None] = []
    with pytest.raises(SupervisorEscalation, match="exited with status 3"):
        with anyio.fail_after(HANG_GUARD):
            await Supervisor([spec], max_restarts=2, backoff=0.01,
                             on_restart=lambda _n, _c, error: restarts.append(error)).run()
    assert runs.read_text() == "xxx"
    assert len(restarts) == 2
    assert all(isinstance(e, ChildExited) for e in restarts)


SLEEPER = """
import os, signal, sys, time
def on_term(signum, frame):
    open(sys.argv[2], "w").write("SIGTERM")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term if sys.argv[3] == "obey" else signal.SIG_IGN)
open(sys.argv[1] + ".tmp", "w").write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(60)
"""


async def _run_sleeper_then_cancel(tmp_path: Path, mode: str, stop_timeout: float) -> int:
    pid_file, term_file = tmp_path / "pid", tmp_path / "term"
    spec = process_child("sleeper", [sys.executable, "-c", SLEEPER, str(pid_file),
                                     str(term_file), mode], stop_timeout=stop_timeout)
    async with anyio.create_task_group() as tg:
        tg.start_soon(Supervisor([spec]).run)
        with anyio.fail_after(HANG_GUARD):
            # Another process writes the file: there is no event to wait on, so poll.
            while not pid_file.exists():  # noqa: ASYNC110
                await anyio.sleep(0.02)
        tg.cancel_scope.cancel()
    return int(pid_file.read_text())


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_cancelled_supervisor_terminates_its_process(tmp_path: Path) -> None:
    pid = await _run_sleeper_then_cancel(tmp_path, "obey", stop_timeout=HANG_GUARD)
    assert (tmp_path / "term").read_text() == "SIGTERM"
    assert _gone(pid)


async def test_process_ignoring_sigterm_is_killed_after_stop_timeout(tmp_path: Path) -> None:
    stop_timeout = 0.3
    started = anyio.current_time()
    pid = await _run_sleeper_then_cancel(tmp_path, "ignore", stop_timeout=stop_timeout)
    assert anyio.current_time() - started >= stop_timeout
    assert not (tmp_path / "term").exists()
    assert _gone(pid)


# -- actors ----------------------------------------------------------------------------


class BrokenActor(Actor):
    """An actor whose configuration is broken: ``serve`` crashes as it starts."""

    role = "broken"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.attempts: list[float] = []

    def sources(self) -> Sequence[Source]:
        self.attempts.append(anyio.current_time())
        raise RuntimeError("no source configured for role 'broken'")


async def test_crashing_actor_is_restarted_with_backoff_then_escalates(
    nats_url: str, prefix: str
) -> None:
    backoff = 0.05
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix)) as bus:
        actor = BrokenActor(bus)
        supervisor = Supervisor([ChildSpec("broken", actor.serve)], max_restarts=2,
                                backoff=backoff, period=60.0)
        with pytest.raises(SupervisorEscalation, match="no source configured"):
            with anyio.fail_after(HANG_GUARD):
                await supervisor.run()
    assert len(actor.attempts) == 3
    gaps = [later - earlier for earlier, later in pairwise(actor.attempts)]
    assert gaps[0] >= backoff - 1e-3
    assert gaps[1] >= 2 * backoff - 1e-3
    assert actor.restarts == 2  # counted by the actor itself; its heartbeats report it


async def test_a_mistake_no_restart_can_fix_escalates_at_once_with_its_message() -> None:
    async def misconfigured(_: int) -> None:
        await anyio.lowlevel.checkpoint()
        raise SetupError("consumer step-x does not exist: run `plancast provision`")

    child, sibling = Child("x", misconfigured), Child("sibling", forever)
    with pytest.raises(SupervisorEscalation, match=r"^x: consumer step-x does not exist"):
        await supervise([child, sibling], max_restarts=5, backoff=0.01)
    assert len(child.starts) == 1 and sibling.cancellations == 1
