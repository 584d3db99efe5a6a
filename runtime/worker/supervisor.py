"""OTP-style supervision of the actors (or child processes) a process starts.

Restart, but never orphan a task: every child runs inside the supervisor's task group,
and a supervisor that gives up (restart intensity exceeded) stops all its children
before it escalates by raising ``SupervisorEscalation``.
"""

from __future__ import annotations

import enum
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectSendStream

from ..errors import SetupError
from .errors import ChildExited, SupervisorEscalation

log = logging.getLogger(__name__)


class Strategy(enum.Enum):
    ONE_FOR_ONE = "one_for_one"
    """Restart only the child that stopped."""
    ONE_FOR_ALL = "one_for_all"
    """Restart every child when one stops (temporary ones are stopped, not restarted)."""
    REST_FOR_ONE = "rest_for_one"
    """Restart the child that stopped and every child started after it (the same way)."""


class Restart(enum.Enum):
    PERMANENT = "permanent"
    """Always restarted."""
    TRANSIENT = "transient"
    """Restarted only when it crashed (an exception), not when it returned."""
    TEMPORARY = "temporary"
    """Never restarted."""


@dataclass
class ChildSpec:
    name: str
    start: Callable[[], Awaitable[None]]
    """Runs the child until it returns (a normal exit) or raises (a crash)."""
    restart: Restart = Restart.PERMANENT


@dataclass
class _Child:
    spec: ChildSpec
    scope: anyio.CancelScope | None = None
    generation: int = 0
    restarts: int = 0
    done: bool = False
    """Finished for good: never started again, not even when a sibling's crash restarts others."""


_Report = tuple[_Child, int, BaseException | None]
"""A child's exit: which child, which of its starts, and the crash (None: it returned)."""
_Sender = MemoryObjectSendStream[_Report]


@dataclass
class Supervisor:
    children: Sequence[ChildSpec]
    strategy: Strategy = Strategy.ONE_FOR_ONE
    max_restarts: int = 3
    """Restarts allowed within ``period`` seconds before escalating."""
    period: float = 5.0
    backoff: float = 0.1
    """Delay before a restart, doubled for each recent restart, capped at ``max_backoff``."""
    max_backoff: float = 5.0
    on_restart: Callable[[str, int, BaseException | None], None] | None = None
    """Called with (child name, its restart count, the crash or None) before each restart."""
    _recent: list[float] = field(default_factory=list)

    async def run(self) -> None:
        """Supervise until every child is done for good; raise on escalation."""
        children = [_Child(spec) for spec in self.children]
        if not children:
            return
        self._recent = []
        escalation: SupervisorEscalation | None = None
        send, receive = anyio.create_memory_object_stream[_Report](100)
        async with send, receive, anyio.create_task_group() as tg:
            for child in children:
                self._start(tg, child, send)
            async for child, generation, error in receive:
                if generation != child.generation:
                    continue  # a child we stopped on purpose
                child.scope = None
                if isinstance(error, SetupError):  # the same mistake would stop it again
                    escalation = SupervisorEscalation(f"{child.spec.name}: {error}")
                    for c in children:
                        self._stop(c)
                    break
                if self._should_restart(child.spec, error):
                    escalation = self._count_restart(child, error)
                    if escalation is not None:
                        for c in children:
                            self._stop(c)
                        break
                    await self._restart(tg, children, child, error, send)
                else:
                    child.done = True
                    log.info("child %s finished%s", child.spec.name,
                             f" after a crash: {error!r}" if error else "")
                if all(c.done for c in children):
                    break
            tg.cancel_scope.cancel()
        # Raised only here, once the task group has waited for every child to stop (and
        # bare, not wrapped in the task group's ExceptionGroup).
        if escalation is not None:
            raise escalation

    def _should_restart(self, spec: ChildSpec, error: BaseException | None) -> bool:
        if spec.restart is Restart.TEMPORARY:
            return False
        return spec.restart is Restart.PERMANENT or error is not None

    def _count_restart(self, failed: _Child,
                       error: BaseException | None) -> SupervisorEscalation | None:
        """Record one more restart; the escalation to raise if that is too many."""
        now = time.monotonic()
        self._recent = [t for t in self._recent if now - t < self.period] + [now]
        if len(self._recent) <= self.max_restarts:
            return None
        return SupervisorEscalation(
            f"child {failed.spec.name!r} stopped {len(self._recent)} times within "
            f"{self.period:g}s (max_restarts={self.max_restarts}); stopped all children. "
            f"Last error: {error!r}")

    async def _restart(self, tg: TaskGroup, children: list[_Child], failed: _Child,
                       error: BaseException | None, send: _Sender) -> None:
        index = children.index(failed)
        if self.strategy is Strategy.ONE_FOR_ONE:
            affected = [failed]
        elif self.strategy is Strategy.ONE_FOR_ALL:
            affected = children
        else:
            affected = children[index:]
        for child in reversed(affected):
            self._stop(child)
            if child.spec.restart is Restart.TEMPORARY:
                child.done = True  # stopped with its siblings, but never restarted
        affected = [child for child in affected if not child.done]
        delay = min(self.backoff * 2 ** (len(self._recent) - 1), self.max_backoff)
        log.warning("restarting %s in %.2fs (%s) after %r",
                    ", ".join(c.spec.name for c in affected), delay, self.strategy.value, error)
        await anyio.sleep(delay)
        for child in affected:
            child.restarts += 1
            if self.on_restart is not None:
                self.on_restart(child.spec.name, child.restarts, error if child is failed else None)
            self._start(tg, child, send)

    def _start(self, tg: TaskGroup, child: _Child, send: _Sender) -> None:
        child.generation += 1
        child.scope = anyio.CancelScope()
        tg.start_soon(self._run_child, child, child.generation, child.scope, send)

    @staticmethod
    def _stop(child: _Child) -> None:
        if child.scope is not None:
            child.generation += 1  # its exit report is now stale
            child.scope.cancel()
            child.scope = None

    @staticmethod
    async def _run_child(child: _Child, generation: int, scope: anyio.CancelScope,
                         send: _Sender) -> None:
        error: BaseException | None = None
        with scope:
            try:
                await child.spec.start()
            except Exception as exc:
                log.error("child %s crashed: %s: %s", child.spec.name, type(exc).__name__, exc)
                error = exc
        if not scope.cancel_called:
            await send.send((child, generation, error))


def process_child(name: str, argv: Sequence[str], *, restart: Restart = Restart.PERMANENT,
                  stop_timeout: float = 20.0) -> ChildSpec:
    """A child that is an OS process: a non-zero exit is a crash; cancelling sends SIGTERM."""

    async def start() -> None:
        process = await anyio.open_process(list(argv), stdin=None, stdout=None, stderr=None)
        try:
            code = await process.wait()
        finally:
            if process.returncode is None:
                with anyio.CancelScope(shield=True):
                    process.send_signal(signal.SIGTERM)
                    with anyio.move_on_after(stop_timeout):
                        await process.wait()
                    if process.returncode is None:
                        process.kill()
                        await process.wait()
        if code != 0:
            raise ChildExited(f"{name} exited with status {code}")

    return ChildSpec(name, start, restart)
