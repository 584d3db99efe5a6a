"""What a planner hears of the other actors: which roles have a live instance, and which
steps each executor still reports in hand.

Heartbeats (core NATS) say both. Silence counts only while the planner hears its own
heartbeats come back: a planner that was paused or cut off learns nothing about others
meanwhile, so its clocks restart when it hears itself again instead of timing out every
step at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

import anyio
from anyio.abc import TaskStatus

from protocols import UNREADABLE, Heartbeat, Stream, Verb, decode, stream_name, subject
from runtime.bus import Bus, NotFoundError

log = logging.getLogger(__name__)

SILENT_AFTER = 3
"""Heartbeat intervals of silence after which an actor counts as gone."""
PRUNE_ABOVE, PRUNE_AFTER = 256, 3600.0
"""An executor's listed work is pruned past this many entries, of those this old (s)."""
CONSUMER_CHECK_EVERY = 2.0
"""Seconds a consumer's activity is cached (workers that send no heartbeats)."""
DELIVERED_CHECK_EVERY = 0.5
"""Seconds a consumer's delivered sequence and backlog are cached (the claim deadline)."""


@dataclass
class _Heard:
    role: str
    at: float
    """Local monotonic time of its latest heartbeat."""
    interval: float
    in_flight: frozenset[str]
    draining: bool


class Liveness:
    """Heartbeats as the planner ``me`` (``role/instance``) hears them."""

    def __init__(self, bus: Bus, me: str) -> None:
        self.bus = bus
        self.me = me
        self._heard: dict[str, _Heard] = {}
        self._role_live: dict[str, float] = {}
        self._listed: dict[str, dict[str, float]] = {}
        """By executor: when its heartbeats last listed each piece of work."""
        self._self_at = 0.0
        self._since = time.monotonic()
        self._consumers: dict[str, tuple[float, bool]] = {}
        self._delivered: dict[str, tuple[float, tuple[int, int]]] = {}

    async def watch(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen to every heartbeat of the deployment until cancelled."""
        sub = await self.bus.nc.subscribe(
            subject(self.bus.prefix, Verb.HEARTBEAT, "*", "*", wildcard=True))
        task_status.started()
        try:
            async for msg in sub.messages:
                try:
                    beat = decode(msg.data, Heartbeat)
                except UNREADABLE as exc:
                    log.debug("ignoring a bad heartbeat on %s: %s", msg.subject, exc)
                    continue
                # The subject's role token is the sender's (its user may publish only
                # there): a beat speaking for another role or instance is ignored.
                if msg.subject.split(".")[-2:] == [beat.role, beat.instance]:
                    self.heard(beat)
                else:
                    log.debug("ignoring a heartbeat on %s for %s/%s", msg.subject,
                              beat.role, beat.instance)
        finally:
            with anyio.CancelScope(shield=True):
                await sub.unsubscribe()

    def heard(self, beat: Heartbeat) -> None:
        now = time.monotonic()
        key = f"{beat.role}/{beat.instance}"
        if key == self.me:
            if now - self._self_at > SILENT_AFTER * beat.interval:
                self._since = now  # we were deaf: what others did meanwhile is unknown
            self._self_at = now
        in_flight = frozenset(beat.in_flight)
        self._heard[key] = _Heard(beat.role, now, beat.interval, in_flight, beat.draining)
        if not beat.draining:
            self._role_live[beat.role] = now
        listed = self._listed.setdefault(key, {})
        for work in in_flight:
            listed[work] = now
        if len(listed) > PRUNE_ABOVE:  # work it stopped listing long ago cannot matter
            for work, at in list(listed.items()):
                if now - at > PRUNE_AFTER:
                    del listed[work]

    # -- questions the planner's timers ask -----------------------------------------------

    def listening(self, interval: float) -> bool:
        """Do we hear our own heartbeats? If not, silence of others means nothing."""
        return time.monotonic() - self._self_at <= SILENT_AFTER * interval

    def since(self) -> float:
        """Monotonic time since which we have heard everything continuously."""
        return self._since

    def live(self, roles: Iterable[str]) -> bool:
        """Does any of these roles have an instance that beats and takes work?"""
        now = time.monotonic()
        for role in roles:
            at = self._role_live.get(role)
            if at is not None and now - at <= SILENT_AFTER * self._interval_of(role):
                return True
        return False

    def silent_for(self, roles: Iterable[str]) -> float:
        """Seconds since any of these roles was last live (since we listen, at most)."""
        last = max((self._role_live.get(r, 0.0) for r in roles), default=0.0)
        return time.monotonic() - max(last, self._since)

    def reporting(self, executor: str, work: str, claimed_at: float,
                  beats: float) -> float | None:
        """Seconds since ``executor`` last showed it holds ``work``: its claim (Unix time
        ``claimed_at``) or a heartbeat listing it. None for a worker that sends no
        heartbeats (``beats`` 0, never heard): only the timeouts apply to it."""
        if executor not in self._heard and not beats:
            return None
        last = self._listed.get(executor, {}).get(work, 0.0)
        return min(time.monotonic() - max(last, self._since), time.time() - claimed_at)

    async def consumer_active(self, stream: Stream, consumer: str) -> bool:
        """Does some process (of any language) pull from this work consumer right now?"""
        now = time.monotonic()
        cached = self._consumers.get(consumer)
        if cached is not None and now - cached[0] < CONSUMER_CHECK_EVERY:
            return cached[1]
        try:
            info = await self.bus.js.consumer_info(stream_name(self.bus.prefix, stream),
                                                   consumer)
            active = bool(info.num_waiting)
        except NotFoundError:
            active = False
        except Exception as exc:  # the server is busy: assume alive rather than fail work
            log.debug("consumer %s unknown for now: %s", consumer, exc)
            active = True
        self._consumers[consumer] = (now, active)
        return active

    def listed(self, role: str, work: str) -> float | None:
        """Seconds since a heartbeat of any instance of ``role`` last listed ``work``
        (None: none did since we listen)."""
        at = max((listed.get(work, 0.0) for key, listed in self._listed.items()
                  if key.partition("/")[0] == role), default=0.0)
        return time.monotonic() - max(at, self._since) if at else None

    async def delivered(self, stream: Stream, consumer: str) -> int:
        """The stream sequence up to which this work consumer has delivered its messages
        (in order: a task at or below it was handed to some process); 0 if unknown."""
        return (await self._progress(stream, consumer))[0]

    async def backlog(self, stream: Stream, consumer: str) -> int:
        """Messages this consumer holds that were not yet acknowledged (waiting, or in
        hand); 1 if unknown, so that nothing is judged on a guess."""
        return (await self._progress(stream, consumer))[1]

    async def _progress(self, stream: Stream, consumer: str) -> tuple[int, int]:
        now = time.monotonic()
        cached = self._delivered.get(consumer)
        if cached is not None and now - cached[0] < DELIVERED_CHECK_EVERY:
            return cached[1]
        try:
            info = await self.bus.js.consumer_info(stream_name(self.bus.prefix, stream),
                                                   consumer)
            seq = int(info.delivered.stream_seq or 0) if info.delivered else 0
            found = (seq, int(info.num_pending or 0) + int(info.num_ack_pending or 0))
        except Exception as exc:  # unknown for now: no deadline passes on a guess
            log.debug("consumer %s unknown for now: %s", consumer, exc)
            found = (0, 1)
        self._delivered[consumer] = (now, found)
        return found

    def _interval_of(self, role: str) -> float:
        return max((h.interval for h in self._heard.values() if h.role == role),
                   default=self.bus.settings.heartbeat_interval)
