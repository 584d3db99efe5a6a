"""The Actor base: typed handlers over core NATS and JetStream work queues.

An actor declares its ``sources`` (where messages come from) and one ``@on(Type)``
handler per message type. The base does the rest the same way for every role: decode
with msgspec, refuse bad input loudly (an ``ActorError`` event and a dead letter, never
a silent drop), keep long work alive with in-progress acks, beat a heartbeat, and on
``drain`` stop taking work, finish or hand back what is in hand, then return. Reading
the sources themselves (subscriptions, pull consumers) is ``runtime.bus.intake``'s.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import socket
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, ClassVar

import anyio
import msgspec
from anyio.abc import TaskGroup, TaskStatus

from protocols import (
    UNREADABLE,
    ActorError,
    Heartbeat,
    InvalidSubjectToken,
    Message,
    Usage,
    Verb,
    WorkError,
    decoder_for,
    object_space,
    validate_token,
)

from ..bus import (
    PULL_CAP,
    TRANSIENT,
    Bus,
    Delivery,
    Intake,
    Source,
    Subscription,
    WorkQueue,
    consumer_config,
    offloaded,
    on,
)
from ..errors import SetupError
from .handlers import HandlerTasks
from .reports import header_safe, tag_of, traceback_tail, work_error

__all__ = ["Actor", "Source", "Subscription", "WorkQueue", "new_instance_id", "on"]

log = logging.getLogger(__name__)


def new_instance_id() -> str:
    """``host-pid-rand``: unique per actor, readable in ``plancast status``."""
    host = re.sub(r"[^A-Za-z0-9_-]", "-", socket.gethostname().split(".")[0])[:40] or "host"
    return f"{host}-{os.getpid()}-{secrets.token_hex(2)}"


class Actor:
    """Subclass, set ``role``, declare ``sources()``, write ``@on`` handlers."""

    role: ClassVar[str] = "actor"
    _handlers: ClassVar[dict[type[Message], str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        handlers = dict(cls._handlers)
        for name, attr in vars(cls).items():
            for handled in getattr(attr, "__plancast_handles__", ()):
                handlers[handled] = name
        cls._handlers = handlers

    def __init__(
        self, bus: Bus, *, role: str | None = None, instance: str | None = None,
        concurrency: int = 1,
    ) -> None:
        self.bus = bus
        self.settings = bus.settings
        self.name = validate_token(role or self.role, "role")
        self.instance = validate_token(instance or new_instance_id(), "instance")
        self.concurrency = concurrency
        self.started_at = time.time()
        self.handled = 0
        self.restarts = 0
        self._slots = anyio.Semaphore(concurrency, fast_acquire=True)
        self._freed = anyio.Event()
        """Set when a handler gives its slot back (a fresh one is made to wait again)."""
        self._in_flight: dict[int, tuple[Delivery, str]] = {}
        self._idle = anyio.Event()
        self._idle.set()
        self._stop = anyio.Event()
        self._draining = False
        self._work: TaskGroup | None = None
        self._handler_tasks: HandlerTasks
        self._intake: TaskGroup | None = None
        self._served = False
        self.serving = anyio.Event()
        """Set once the actor first reads all its sources (it stays set across restarts)."""
        self._ack_wait = self.settings.ack_wait
        """The shortest ack wait of this actor's sources: in-progress acks go out faster."""

    # -- what subclasses provide -------------------------------------------------------

    def sources(self) -> Sequence[Source]:
        """Where this actor's messages come from."""
        raise NotImplementedError(f"{type(self).__name__} must declare its sources()")

    def describe(self, message: Message) -> str:
        """How in-flight work is shown in heartbeats; roles override with ``run/step``."""
        return type(message).__name__

    async def refuse(self, delivery: Delivery, reason: str) -> None:
        """A message that cannot be decoded: report it and keep it as a dead letter."""
        await self._reject(delivery, reason)

    # -- life cycle ----------------------------------------------------------------------

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until ``drain()`` is called (then return) or the caller cancels.

        A supervisor may call it again after a crash: the actor starts afresh (its
        unacknowledged work comes back through JetStream) and counts the restart.
        """
        if self._served:
            self.restarts += 1
            self._stop, self._draining = anyio.Event(), False
            self._in_flight.clear()
            self._idle = anyio.Event()
            self._idle.set()
            self._slots = anyio.Semaphore(self.concurrency, fast_acquire=True)
            self._freed = anyio.Event()
        self._served = True
        async with anyio.create_task_group() as outer:
            outer.start_soon(self._heartbeat_loop)
            outer.start_soon(self._keep_alive_loop)
            async with anyio.create_task_group() as work:
                self._work = work
                self._handler_tasks = HandlerTasks(work, self._handle)
                async with anyio.create_task_group() as intake:
                    self._intake = intake
                    for source in self.sources():
                        await intake.start(self._consume, source)
                    self.serving.set()
                    task_status.started()
                    await self._stop.wait()
                    intake.cancel_scope.cancel()
                with anyio.move_on_after(self.settings.drain_timeout):
                    await self._idle.wait()
                for delivery, what in list(self._in_flight.values()):
                    log.warning("%s: handing back unfinished %s", self.name, what)
                    with anyio.CancelScope(shield=True):
                        await delivery.nak()
                work.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                await self._beat()
                with contextlib.suppress(Exception):
                    # Acks are fire-and-forget: get them to the server before we return
                    # (a process exiting now would otherwise leave done work to redeliver).
                    await self.bus.nc.flush(timeout=5)
            outer.cancel_scope.cancel()

    def drain(self) -> None:
        """Stop taking work; ``serve`` returns once in-flight work is done or handed back."""
        self._draining = True
        self._stop.set()

    def start_soon(self, fn: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        """Run ``fn()`` beside the handlers, in their task group (also from a loop
        callback, such as a timer's)."""
        if self._work is None:
            raise RuntimeError(f"{self.name} is not serving")
        self._work.start_soon(fn)

    async def add_source(self, source: Source) -> anyio.CancelScope:
        """Start reading one more source while serving; cancel the scope to stop it."""
        if self._intake is None or self._draining:
            raise RuntimeError(f"{self.name} is not serving; sources can be added only then")
        scope: anyio.CancelScope = await self._intake.start(self._consume, source)
        return scope

    # -- intake and slots ----------------------------------------------------------------

    async def _consume(self, source: Source, *, task_status: TaskStatus[Any]) -> None:
        """Read one source into this actor's slots until cancelled (``runtime.bus.intake``)."""
        accepts = source.accepts or tuple(self._handlers)
        unknown = [t.__name__ for t in accepts if t not in self._handlers]
        if unknown:
            raise TypeError(f"{type(self).__name__} has no @on handler for {unknown}")
        decoder = decoder_for(accepts[0] if len(accepts) == 1 else _union(accepts))
        intake = Intake(self.bus, self.name, self._admit, self._admit_now, self._room,
                        lambda: int(self._slots.value), min(self.concurrency, PULL_CAP))
        with anyio.CancelScope() as scope:
            if isinstance(source, Subscription):
                await intake.subscription(source, decoder, scope, task_status)
            else:
                config = consumer_config(source, self.settings)
                self._ack_wait = min(self._ack_wait, config.ack_wait or self._ack_wait)
                await intake.work_queue(source, config, decoder, scope, task_status)

    async def _room(self) -> None:
        """Until a slot is free. Not by taking one and giving it back: with two sources
        waiting that way, each hands the slot to the other and sees no room itself."""
        while self._slots.value == 0:
            if self._freed.is_set():
                self._freed = anyio.Event()
            await self._freed.wait()

    def _admit_now(self, delivery: Delivery, decoder: Any) -> bool:
        """Handle the message if a slot is free now (it is being read: no waiting)."""
        if self._draining or self._work is None or self._slots.value == 0:
            return False
        self._slots.acquire_nowait()
        self._start_handling(delivery, decoder)
        return True

    async def _admit(self, delivery: Delivery, decoder: Any) -> None:
        """Wait for a free slot, then handle the message in a task of its own (one that
        has finished its last, if any is idle: ``runtime.actor.handlers``)."""
        await self._slots.acquire()
        self._start_handling(delivery, decoder)

    def _start_handling(self, delivery: Delivery, decoder: Any) -> None:
        self._in_flight[id(delivery)] = (delivery, delivery.subject)
        if self._idle.is_set():
            self._idle = anyio.Event()
        self._handler_tasks.submit(delivery, decoder)

    # -- handling ------------------------------------------------------------------------

    async def _handle(self, delivery: Delivery, decoder: Any) -> None:
        try:
            message = await self._decode(delivery, decoder)
            if isinstance(message, str):
                await self.refuse(delivery, message)
                return
            self._in_flight[id(delivery)] = (delivery, self.describe(message))
            handler = getattr(self, self._handlers[type(message)])
            try:
                await handler(message, delivery)
            except Exception as exc:
                await self._handler_failed(delivery, message, exc)
            else:
                await delivery.ack()
        finally:
            self.handled += 1
            del self._in_flight[id(delivery)]
            if not self._in_flight:
                self._idle.set()
            self._slots.release()
            self._freed.set()

    async def _decode(self, delivery: Delivery, decoder: Any) -> Message | str:
        """The decoded message, or the reason it is refused."""
        limit = self.settings.max_message_bytes
        if delivery.size > limit:
            return (
                f"oversized message: {delivery.size} bytes exceeds the {limit}-byte limit "
                "(PLANCAST_MAX_MESSAGE_BYTES); send large payloads through the object store"
            )
        try:
            message: Message = decoder.decode(delivery.data)
            return message
        except msgspec.ValidationError as exc:
            if offloaded(delivery.data) is not None:
                return await self._decode_offloaded(delivery, decoder)
            return f"invalid message ({tag_of(delivery.data)}): {exc}"
        except UNREADABLE as exc:
            # Nesting is bounded by msgspec itself (RecursionError), before any stack
            # is at risk; invalid UTF-8 in a string is a UnicodeDecodeError.
            return f"malformed message, not valid JSON: {type(exc).__name__}: {exc}"[:500]

    def offload_space(self, delivery: Delivery) -> str | None:
        """Where the object a message by reference names must be kept: the space of the
        subject it came on, the only one its sender may write (``protocols.objects``)."""
        try:
            return object_space(self.bus.prefix, delivery.subject)
        except InvalidSubjectToken:
            return None

    def object_limit(self, delivery: Delivery) -> int | None:
        """Most bytes the sender of ``delivery`` may send by reference; None: the
        deployment's ``PLANCAST_MAX_OBJECT_BYTES`` (the planner knows each role's)."""
        return None

    async def _decode_offloaded(self, delivery: Delivery, decoder: Any) -> Message | str:
        """A message too large to send came by reference: fetch it from the object store
        (an object outside the space of the subject it came on, or of more than its sender
        may send, is refused unfetched)."""
        space = self.offload_space(delivery)
        if space is None:
            return f"a message by reference on {delivery.subject}, where none may come"
        try:
            message: Message = decoder.decode(await self.bus.resolve(
                delivery.data, space=space, limit=self.object_limit(delivery)))
            return message
        except UNREADABLE as exc:
            return f"invalid offloaded message: {exc}"[:500]
        except Exception as exc:
            return f"offloaded message could not be fetched: {type(exc).__name__}: {exc}"

    async def _reject(self, delivery: Delivery, reason: str, tb: str = "") -> None:
        """Bad input: report it, keep the payload as a dead letter, never redeliver."""
        log.error("%s/%s refused a message on %s: %s", self.name, self.instance,
                  delivery.subject, reason)
        dead = self.bus.subject(Verb.DEAD, self.name)
        try:
            await self.bus.js.publish(
                dead, delivery.data,
                headers={"Plancast-Subject": delivery.subject,
                         "Plancast-Reason": header_safe(reason)},
            )
        except Exception as exc:
            log.error("could not keep dead letter on %s: %s", dead, exc)
            dead = ""
        report = ActorError(
            role=self.name, instance=self.instance, subject=delivery.subject, reason=reason,
            size=delivery.size, excerpt=delivery.data[:256].decode("utf-8", "replace"),
            dead_letter=dead, traceback=tb, ts=time.time(),
        )
        await self._report(report)
        await delivery.respond(report)
        await delivery.term()

    async def _handler_failed(self, delivery: Delivery, message: Message,
                              exc: Exception) -> None:
        """A handler raised: retry while deliveries remain, then dead-letter. The run the
        work belongs to hears of it (``work.error``); a passing bus error is only logged. A
        setup mistake (``SetupError``: a misconfigured model) is never retried: the same
        request would fail the same way, so the run hears of it once and fails."""
        setup = isinstance(exc, SetupError)
        reason = str(exc) if setup else f"{type(exc).__name__}: {exc}"
        will_retry = delivery.durable and delivery.retries_left() and not setup
        spent = getattr(exc, "usage", None)  # a failed model call's requests (ModelError)
        report = work_error(message, actor=f"{self.name}/{self.instance}",
                            delivery=delivery.deliveries, error=reason, will_retry=will_retry,
                            setup_error=setup, usage=spent if isinstance(spent, Usage) else None)
        if report is not None:
            await self._tell_run(report)
        if will_retry:
            if isinstance(exc, TRANSIENT):
                log.warning("%s: %s (delivery %d, will retry)", self.name, reason,
                            delivery.deliveries)
            else:
                log.warning("%s: handler %s (delivery %d, will retry)", self.name, reason,
                            delivery.deliveries)
                await self._report(ActorError(
                    role=self.name, instance=self.instance, subject=delivery.subject,
                    reason=f"handler {reason} (delivery {delivery.deliveries}, will retry)",
                    size=delivery.size, traceback=traceback_tail(exc), ts=time.time(),
                ))
            await delivery.nak(delay=min(2.0 ** delivery.deliveries, 30.0) / 4)
            return
        await self._reject(delivery, f"handler {reason}", traceback_tail(exc))

    async def _tell_run(self, report: WorkError) -> None:
        try:
            await self.bus.publish_durable(
                self.bus.subject(Verb.RESULT, report.run_id, self.name), report)
        except Exception as exc:
            log.error("could not tell run %s of a failure: %s (%s)", report.run_id, exc,
                      report.error)

    async def _report(self, report: ActorError) -> None:
        try:
            await self.bus.publish_durable(self.bus.subject(Verb.ERROR, self.name), report)
        except Exception as exc:
            log.error("could not publish error event: %s (%s)", exc, report.reason)

    # -- liveness ------------------------------------------------------------------------

    def offered_tools(self) -> list[str]:
        """The tools its heartbeats list (``plancast status``); a role's override it."""
        return []

    async def _heartbeat_loop(self) -> None:
        while True:
            await self._beat()
            await anyio.sleep(self.settings.heartbeat_interval)

    async def _beat(self) -> None:
        beat = Heartbeat(
            role=self.name, instance=self.instance, host=socket.gethostname(), pid=os.getpid(),
            started_at=self.started_at, ts=time.time(),
            interval=self.settings.heartbeat_interval,
            in_flight=[what for _, what in self._in_flight.values()], handled=self.handled,
            restarts=self.restarts, draining=self._draining, tools=self.offered_tools(),
        )
        try:
            await self.bus.publish(self.bus.subject(Verb.HEARTBEAT, self.name, self.instance), beat)
        except Exception as exc:
            log.debug("heartbeat not sent: %s", exc)

    async def _keep_alive_loop(self) -> None:
        """Tell JetStream that long-running work is still in hand (no redelivery)."""
        while True:
            period = self._ack_wait / 3
            await anyio.sleep(period)
            now = time.monotonic()
            for delivery, _ in list(self._in_flight.values()):
                if delivery.durable and now - delivery.received_at >= period:
                    try:
                        await delivery.in_progress()
                    except Exception as exc:
                        log.debug("in-progress ack failed: %s", exc)


def _union(types: tuple[type[Message], ...]) -> Any:
    union: Any = types[0]
    for t in types[1:]:
        union = union | t
    return union
