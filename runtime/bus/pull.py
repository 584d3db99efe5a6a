"""A consume loop on one durable JetStream pull consumer: one pull request open at a time
for as many messages as the actor has room for, read off one inbox.

nats-py's ``fetch(batch=1)`` costs a request, a future and a timer per message; a chain
of steps or a burst of results then pays that for every message. Here a request asks for
up to ``room()`` messages (capped) and stays open until they have come or it expires
(``FETCH_WAIT``, so a draining actor is never held longer than before); the messages
that arrive in one event-loop turn are handed over together. Nothing changes about what
is delivered or acknowledged: every message is handed to the caller, which settles it.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import anyio
from nats.js.api import Header, StatusCode

from .core import Bus
from .errors import ConsumerGone
from .jetstream import subscribe_direct

log = logging.getLogger(__name__)

SLACK = 0.5
"""Seconds past a request's expiry after which it is taken for ended even though its
"request timeout" status never came (lost in a reconnect)."""


class Pull:
    """Pull requests on ``<stream>/<consumer>`` delivered to an inbox of our own."""

    def __init__(self, bus: Bus, stream: str, consumer: str, *, cap: int,
                 expires: float) -> None:
        self.bus = bus
        self.next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self.cap = max(1, cap)
        self.expires = expires
        self.inbox = ""
        self._sub: Any = None
        self._arrived: deque[Any] = deque()
        self._wake = anyio.Event()
        self._open = 0
        """Messages the open request may still bring (0: no request open)."""
        self._ends = 0.0
        """Monotonic time by which the open request has surely ended."""
        self._gone = ""
        """Why the server says the consumer is gone (raised at the next call)."""
        self.answered = False
        """The consumer has answered a request (a message, or a status other than "no
        responders"): it exists and has a leader."""
        self.take: Callable[[Any], bool] | None = None
        """Offered each message as it is read, when none is waiting: True if it took it
        (handed it to a handler then and there); else it waits for ``next_batch``."""

    async def start(self) -> None:
        self.inbox = self.bus.nc.new_inbox()
        self._sub = await subscribe_direct(self.bus.nc, self.inbox, self._arrive)

    async def stop(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None

    def drop(self) -> list[Any]:
        """The messages that arrived and were not taken (the caller gives them back)."""
        left = [m for m in self._arrived if not (m.headers and m.headers.get(Header.STATUS))]
        self._arrived.clear()
        return left

    def _arrive(self, msg: Any) -> None:
        if self.take is not None and not self._arrived \
                and not (msg.headers and msg.headers.get(Header.STATUS)) and self.take(msg):
            self.answered = True
            self._open = max(0, self._open - 1)
            if not self._open:
                self._wake.set()  # the request is used up: the caller asks for more
            return
        self._arrived.append(msg)
        self._wake.set()

    async def next_batch(self, room: Callable[[], int]) -> list[Any]:
        """The messages that have arrived (waiting up to about ``expires`` for some); asks
        for more first when no request is open and ``room()`` says there is room, and
        returns at once, empty, when there is none.
        ``ConsumerGone`` once every message that came before the news has been returned."""
        if self._gone:
            raise ConsumerGone(self._gone)
        if self._open and time.monotonic() > self._ends:
            self._open = 0  # its end went unheard
        if not self._open and not self._arrived:
            want = min(room(), self.cap)
            if want <= 0:
                # No room: waiting here would hold back the next request for a whole expiry
                # after the room comes back (another source of the actor took the slot the
                # caller had just seen free). The caller waits for room, then asks.
                return []
            await self._request(want)
        if not self._arrived:
            with anyio.move_on_after(self.expires + SLACK):
                await self._wake.wait()
        self._wake = anyio.Event()
        batch: list[Any] = []
        while self._arrived:
            msg = self._arrived.popleft()
            headers = msg.headers
            status = headers.get(Header.STATUS) if headers else None
            if status is None:
                self.answered = True
                self._open = max(0, self._open - 1)
                batch.append(msg)
            else:
                self._status(status, headers)
        return batch

    async def _request(self, n: int) -> None:
        body = json.dumps({"batch": n, "expires": int(self.expires * 1e9)}).encode()
        await self.bus.nc.publish(self.next_subject, body, reply=self.inbox)
        self._open, self._ends = n, time.monotonic() + self.expires + SLACK

    def _status(self, status: str, headers: dict[str, str]) -> None:
        """A request ended without (all of) its messages, or the consumer is in trouble."""
        if status == StatusCode.CONTROL_MESSAGE:
            self.answered = True
            return  # an idle heartbeat: the request is still open
        self._open = 0
        description = headers.get(Header.DESCRIPTION, "")
        if status == StatusCode.SERVICE_UNAVAILABLE:  # no responders: no such consumer now
            self._gone = f"{status} {description}".strip()
        elif status == StatusCode.CONFLICT:
            if "deleted" in description.lower() or "leadership" in description.lower():
                self._gone = description
            log.debug("pull request on %s ended: 409 %s", self.next_subject, description)
        self.answered = self.answered or not self._gone  # e.g. 408: expired, none came
