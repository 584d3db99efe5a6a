"""Connecting and provisioning: a deadline for the first connection, reconnects forever
after it, and start-up that rides out JetStream being briefly unavailable."""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
import anyio.to_thread
import pytest
from nats.js import api
from nats.js.errors import KeyNotFoundError, NoStreamResponseError, ServiceUnavailableError

from protocols import RunStarted, Stream, Verb, runs_bucket, stream_name
from runtime.bus import (
    NatsServerProcess,
    NatsUnreachable,
    ProvisionError,
    Retry,
    connect,
    describe,
    free_port,
    is_transient,
    open_bus,
    provision,
    stream_configs,
)
from runtime.config import Settings

pytestmark = pytest.mark.anyio

SLACK = 5.0
"""Seconds allowed past a deadline for the event loop, the OS and a busy machine."""


class Records(logging.Handler):
    """Log records of one logger, with an event per message fragment a test waits for."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self._waiting: dict[str, tuple[int, anyio.Event]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        for fragment, (count, event) in self._waiting.items():
            if self.count(fragment) >= count:
                event.set()

    def count(self, fragment: str, level: int = logging.DEBUG) -> int:
        return sum(fragment in r.getMessage() for r in self.records if r.levelno >= level)

    def at_least(self, fragment: str, count: int = 1) -> anyio.Event:
        """An event set once ``count`` records containing ``fragment`` were logged
        (set from the event loop's thread: every logger here logs from it)."""
        event = anyio.Event()
        self._waiting[fragment] = (count, event)
        if self.count(fragment) >= count:
            event.set()
        return event

    def warnings(self) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno >= logging.WARNING]


@contextmanager
def recording(name: str) -> Iterator[Records]:
    logger, handler = logging.getLogger(name), Records()
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


@asynccontextmanager
async def no_stray_tasks() -> AsyncIterator[None]:
    """Fails if the block leaves a task running or a task exception nobody retrieved."""
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    old_handler = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    before = asyncio.all_tasks()
    try:
        yield
        for _ in range(5):  # let cancelled tasks finish being cancelled
            await asyncio.sleep(0)
        gc.collect()  # "Task exception was never retrieved" is reported on collection
        left = {t for t in asyncio.all_tasks() - before if not t.done()}
        assert not left, f"tasks left behind: {left}"
        assert not reported, f"unhandled in the event loop: {reported}"
    finally:
        loop.set_exception_handler(old_handler)


def closed_port_url() -> str:
    return f"nats://127.0.0.1:{free_port()}"


@contextmanager
def silent_listener() -> Iterator[str]:
    """A TCP port that accepts connections (the kernel's backlog) and never says a word."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"nats://127.0.0.1:{sock.getsockname()[1]}"


# -- the first connection -----------------------------------------------------------------


@pytest.mark.parametrize("server", ["refused", "silent"])
async def test_open_bus_gives_up_within_the_connect_timeout(server: str) -> None:
    """A port nobody listens on, and a server that accepts TCP but never answers: both are
    one ``NatsUnreachable`` naming the URL, within the timeout, leaving nothing running."""
    with silent_listener() as silent, recording("runtime.bus.connection") as logged:
        url = closed_port_url() if server == "refused" else silent
        settings = Settings(nats_url=url, connect_timeout=1.0)
        started = anyio.current_time()
        async with no_stray_tasks():
            with pytest.raises(NatsUnreachable) as err:
                async with open_bus(settings):
                    pytest.fail("connected to nothing")
        elapsed = anyio.current_time() - started
    assert elapsed < settings.connect_timeout + SLACK
    message = str(err.value)
    assert url in message and "--connect-timeout" in message and "\n" not in message
    assert "()" not in message, "the cause is named"
    assert isinstance(err.value, ConnectionError)
    assert logged.warnings() == [], "attempts before the first connection are not warnings"


async def test_the_first_connection_waits_for_a_server_that_starts_late(
    tmp_path: Any,
) -> None:
    """A server that comes up while we are still trying is connected to."""
    port = free_port()
    server = NatsServerProcess(tmp_path, port=port)
    try:
        with recording("runtime.bus.connection") as logged:
            failed_once = logged.at_least("connection attempt failed")
            settings = Settings(nats_url=f"nats://127.0.0.1:{port}", connect_timeout=60.0)
            async with anyio.create_task_group() as tg:
                tg.start_soon(open_and_publish, settings)
                await failed_once.wait()
                await anyio.to_thread.run_sync(server.start)
        assert logged.warnings() == []
    finally:
        server.stop()


async def open_and_publish(settings: Settings) -> None:
    async with open_bus(settings) as bus:
        await bus.publish_durable(bus.subject(Verb.EVENT, "r1"), RunStarted(run_id="r1", goal="g"))


async def test_reconnects_go_on_past_the_connect_timeout(
    fresh_nats_server: NatsServerProcess, prefix: str,
) -> None:
    """Once connected, an outage longer than the connect timeout is ridden out, with one
    warning for it rather than one per attempt."""
    settings = Settings(nats_url=fresh_nats_server.url, prefix=prefix, connect_timeout=0.5)
    with recording("runtime.bus.connection") as logged:
        async with open_bus(settings) as bus:
            lost, back = logged.at_least("disconnected"), logged.at_least("reconnected")
            await anyio.to_thread.run_sync(fresh_nats_server.stop)
            await lost.wait()
            # Several failed attempts: more than the first connection's round allows.
            await logged.at_least("connection attempt failed", 4).wait()
            await anyio.to_thread.run_sync(fresh_nats_server.start)
            with anyio.fail_after(30):
                await back.wait()
            seq = await bus.publish_durable(
                bus.subject(Verb.EVENT, "r1"), RunStarted(run_id="r1", goal="g"), msg_id="r1/1")
            assert seq >= 1 and bus.nc.is_connected
    assert len(logged.warnings()) == 1, logged.warnings()
    assert logged.warnings()[0].startswith(f"disconnected from NATS at {fresh_nats_server.url}")


async def test_connect_to_several_urls_uses_the_one_that_answers(nats_url: str) -> None:
    """A dead URL in the list does not stop the connection through a live one."""
    settings = Settings(connect_timeout=10.0)
    async with no_stray_tasks():
        nc = await connect(f"{closed_port_url()}, {nats_url}", settings)
        try:
            assert nc.is_connected
            assert nc.options["max_reconnect_attempts"] == -1, "reconnect forever from now on"
        finally:
            await nc.close()


# -- provisioning -------------------------------------------------------------------------


async def test_provision_adds_new_subjects_to_an_existing_stream(
    nats_url: str, prefix: str,
) -> None:
    """A deployment made before the ``fence`` verb existed gets it on the next start; a
    second start changes nothing."""
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix), ensure_streams=False) as bus:
        events = next(c for c in stream_configs(prefix, replicas=1, event_max_age=3600.0,
                                                max_msg_size=-1) if "EVENTS" in (c.name or ""))
        old_subjects = [s for s in events.subjects or [] if ".fence." not in s]
        assert old_subjects != events.subjects, "the events stream takes fence subjects"
        events.subjects = old_subjects
        await bus.js.add_stream(events)
        with recording("runtime.bus.provisioning") as logged:
            await provision(bus.js, prefix, event_max_age=3600.0)
            await provision(bus.js, prefix, event_max_age=3600.0)
        info = await bus.js.stream_info(stream_name(prefix, Stream.EVENTS))
        assert f"{prefix}.fence.>" in (info.config.subjects or [])
        assert logged.count("updated stream") == 1
        await bus.js.key_value(runs_bucket(prefix))


async def test_provision_moves_errors_and_outcomes_of_an_older_deployment(
    nats_url: str, prefix: str
) -> None:
    """A deployment made when errors lived in the events stream and outcomes in a work
    queue: the next start gives errors a stream of their own and makes the (empty) results
    stream anew with interest retention; one still holding outcomes is left alone, with a
    line saying what to do."""
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix), ensure_streams=False) as bus:
        configs = stream_configs(prefix, replicas=1, event_max_age=3600.0, max_msg_size=-1)
        old = {c.name: c for c in configs if not (c.name or "").endswith("_ERRORS")}
        events, results = stream_name(prefix, Stream.EVENTS), stream_name(prefix, Stream.RESULTS)
        old[events].subjects = [*(old[events].subjects or []), f"{prefix}.error.>"]
        old[results].retention = api.RetentionPolicy.WORK_QUEUE
        for config in old.values():
            await bus.js.add_stream(config)
        await bus.js.publish(f"{prefix}.result.run-1.worker", b"an outcome not yet read")
        with pytest.raises(ProvisionError, match="let the planners drain it"):
            await provision(bus.js, prefix, event_max_age=3600.0)
        await bus.js.purge_stream(results)
        await provision(bus.js, prefix, event_max_age=3600.0, max_bytes=8 << 20)
        infos = {kind: (await bus.js.stream_info(stream_name(prefix, kind))).config
                 for kind in (Stream.EVENTS, Stream.ERRORS, Stream.RESULTS, Stream.DEAD)}
    assert f"{prefix}.error.>" not in (infos[Stream.EVENTS].subjects or [])
    assert infos[Stream.ERRORS].subjects == [f"{prefix}.error.>"]
    assert infos[Stream.ERRORS].max_msgs_per_subject == 64  # 8 MiB is small: the floor
    assert infos[Stream.ERRORS].discard == api.DiscardPolicy.OLD
    assert infos[Stream.RESULTS].retention == api.RetentionPolicy.INTEREST
    assert infos[Stream.DEAD].max_msgs_per_subject == 64


async def test_provision_rides_out_a_server_restart(
    fresh_nats_server: NatsServerProcess, prefix: str,
) -> None:
    """Provisioning that starts while the server is down finishes once it is back."""
    settings = Settings(nats_url=fresh_nats_server.url, prefix=prefix)
    async with open_bus(settings, ensure_streams=False) as bus:
        await anyio.to_thread.run_sync(fresh_nats_server.stop)
        with recording("runtime.bus.provisioning") as logged:
            retrying = logged.at_least("retrying")
            async with anyio.create_task_group() as tg:
                tg.start_soon(provision, bus.js, prefix)
                await retrying.wait()
                await anyio.to_thread.run_sync(fresh_nats_server.start)
        assert logged.warnings() == []
        names = {info.config.name async for info in streams(bus.js)}
        assert {stream_name(prefix, kind) for kind in Stream} <= names


async def streams(js: Any) -> AsyncIterator[api.StreamInfo]:
    for info in await js.streams_info():
        yield info


@pytest.mark.cluster
async def test_provision_rides_out_a_cluster_without_quorum(
    nats_cluster: list[NatsServerProcess], prefix: str,
) -> None:
    """R3 streams asked for while two of three nodes are down are made once they return."""
    first, *others = nats_cluster
    settings = Settings(nats_url=first.url, prefix=prefix, replicas=3)
    async with open_bus(settings, ensure_streams=False) as bus:
        for node in others:
            await anyio.to_thread.run_sync(node.kill)
        with recording("runtime.bus.provisioning") as logged:
            retrying = logged.at_least("retrying")
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: provision(bus.js, prefix, replicas=3,
                                                retry=Retry(deadline=60.0)))
                await retrying.wait()
                for node in others:
                    await anyio.to_thread.run_sync(node.start)
        info = await bus.js.stream_info(stream_name(prefix, Stream.EVENTS))
        assert info.config.num_replicas == 3


async def test_provision_gives_up_on_a_server_without_jetstream(tmp_path: Any) -> None:
    """No JetStream to answer: one line after the retry deadline, naming what to check."""
    with NatsServerProcess(tmp_path, jetstream=False) as server:
        settings = Settings(nats_url=server.url, publish_retry_for=1.0)
        started = anyio.current_time()
        with pytest.raises(ProvisionError) as err:
            async with open_bus(settings):
                pytest.fail("provisioned without JetStream")
        assert anyio.current_time() - started < 1.0 + SLACK
    message = str(err.value)
    assert server.url in message and "JetStream enabled" in message and "\n" not in message


async def test_provision_fails_at_once_on_an_error_that_will_not_pass(
    nats_url: str, prefix: str,
) -> None:
    """Three replicas on a single server is a configuration error: no retrying."""
    settings = Settings(nats_url=nats_url, prefix=prefix, replicas=3, publish_retry_for=60.0)
    started = anyio.current_time()
    with pytest.raises(ProvisionError, match="PLANCAST_REPLICAS"):
        async with open_bus(settings):
            pytest.fail("provisioned three replicas on one server")
    assert anyio.current_time() - started < 60.0


def test_passing_failures_are_told_from_answers() -> None:
    """A leader election's "no response" and a 503 pass; a key that is not there is an
    answer (nats-py makes KeyValue errors without a code: reading one must not fail)."""
    assert is_transient(NoStreamResponseError()) and is_transient(TimeoutError())
    assert is_transient(ServiceUnavailableError(code=503))
    assert not is_transient(KeyNotFoundError())
    # and it can be described: chaos seed 44 refused two submissions with the AttributeError
    assert describe(KeyNotFoundError()).startswith("KeyNotFoundError")
