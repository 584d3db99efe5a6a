"""Reading one subject of a stream in order, from a stream sequence on: an ephemeral push
consumer with its own inbox, idle heartbeats (a dead consumer is noticed), flow control
and a check that delivery numbers have no gap. ``follow`` builds on it; a reader that is
lost is made again from the sequence after the last message read."""

from __future__ import annotations

from contextlib import suppress
from typing import Any

import anyio
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import api
from nats.js.errors import APIError

from .core import Bus

API_TIMEOUT = 2.0
"""Seconds a reader waits for JetStream to make its consumer before trying again."""
HEARTBEAT = 1.0
"""Seconds between the idle heartbeats of a reader's consumer."""
LOST_AFTER = 3.0
"""Seconds without a message or a heartbeat after which a reader's consumer is presumed
lost (its server died or restarted) and made again."""
STREAM_NOT_FOUND = 10059
"""JetStream's error code for a stream that does not exist."""


class _Lost(Exception):
    """The consumer stopped delivering, or delivered out of order: make a new one."""


class StreamReader:
    """One ephemeral push consumer of a run's events, from a stream sequence on.

    Its own inbox, idle heartbeats (so a dead consumer is noticed), flow control and a
    check that the consumer's delivery numbers have no gap (so nothing was skipped).
    """

    def __init__(self, bus: Bus, subject: str, stream: str) -> None:
        self.bus, self.subject, self.stream = bus, subject, stream
        self.sub: Subscription | None = None
        self.consumer = ""
        self.delivered = 0
        self.last_heard = 0.0
        self.reconnects = 0

    async def open(self, start_seq: int) -> None:
        nc = self.bus.nc
        self.reconnects = int(nc.stats["reconnects"])
        inbox = nc.new_inbox()
        self.sub = await nc.subscribe(inbox)
        config = api.ConsumerConfig(
            deliver_subject=inbox, filter_subject=self.subject,
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start_seq,
            ack_policy=api.AckPolicy.NONE, max_deliver=1, flow_control=True,
            idle_heartbeat=HEARTBEAT, mem_storage=True, num_replicas=1,
        )
        info = await self.bus.js.add_consumer(self.stream, config=config, timeout=API_TIMEOUT)
        self.consumer, self.delivered = info.name, 0
        self.last_heard = anyio.current_time()

    async def close(self, *, delete: bool) -> None:
        """Stop listening; ``delete`` also removes the consumer (else the server reaps it
        once it notices nobody listens)."""
        sub, self.sub = self.sub, None
        with anyio.CancelScope(shield=True), anyio.move_on_after(1.0), suppress(Exception):
            if sub is not None:
                await sub.unsubscribe()
            if delete and self.consumer and self.bus.nc.is_connected:
                await self.bus.js.delete_consumer(self.stream, self.consumer)

    async def next(self, wait: float) -> Msg | None:
        """The next event message, or None if none came within ``wait`` seconds.

        Raises ``_Lost`` when the consumer must be made again.
        """
        assert self.sub is not None
        if self.bus.nc.stats["reconnects"] != self.reconnects:
            raise _Lost("the connection was re-established")
        try:
            msg = _queued(self.sub) or await self.sub.next_msg(timeout=max(wait, 0.001))
        except NatsTimeoutError:
            if anyio.current_time() - self.last_heard > LOST_AFTER:
                raise _Lost(f"no message or heartbeat for {LOST_AFTER:g}s") from None
            return None
        self.last_heard = anyio.current_time()
        headers = msg.headers or {}
        if status := headers.get(api.Header.STATUS):
            await self._control(msg, status, headers)
            return None
        dseq = msg.metadata.sequence.consumer
        if dseq != self.delivered + 1:
            raise _Lost(f"delivery {dseq} after {self.delivered}")
        self.delivered = dseq
        return msg

    async def _control(self, msg: Msg, status: str, headers: dict[str, str]) -> None:
        if status != api.StatusCode.CONTROL_MESSAGE:
            raise _Lost(f"status {status} {headers.get(api.Header.DESCRIPTION, '')}".strip())
        if msg.reply:  # a flow control request: we have read everything before it
            await self.bus.nc.publish(msg.reply)
            return
        if stalled := headers.get(api.Header.CONSUMER_STALLED):
            await self.bus.nc.publish(stalled)
        last = headers.get(api.Header.LAST_CONSUMER)
        if last is not None and int(last) != self.delivered:
            raise _Lost(f"the server delivered {last}, we received {self.delivered}")


def _queued(sub: Any) -> Msg | None:
    """A message already waiting in the subscription, taken without nats-py's ``next_msg``
    (a UUID and two tasks per call: most of a watcher's cost per event when they come
    fast); None when none waits (or nats-py keeps its queue elsewhere now)."""
    queue = getattr(sub, "_pending_queue", None)
    if queue is None or queue.empty():
        return None
    msg: Msg = queue.get_nowait()
    sub._pending_size -= len(msg.data)
    queue.task_done()
    return msg


def stream_missing(exc: BaseException) -> bool:
    """Whether JetStream answered that the stream does not exist."""
    return isinstance(exc, APIError) and exc.err_code == STREAM_NOT_FOUND


def describe(exc: BaseException) -> str:
    """A NATS error in a few words, for a log line."""
    if isinstance(exc, APIError):  # nats-py's KeyValue errors are made without these fields
        what = getattr(exc, "description", None) or type(exc).__name__
        return f"{what} (code {getattr(exc, 'code', None)})"
    return str(exc) or type(exc).__name__
