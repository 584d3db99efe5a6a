"""Create or update the streams and buckets a deployment needs; safe to run on every start.

Provisioning happens while servers may still be starting, electing leaders or losing a
node, so JetStream timeouts and "unavailable" answers are retried (with backoff, up to
the ``Retry`` deadline the caller passes in); an error that will not pass on its own, or
the deadline, ends it with one ``ProvisionError`` line saying what to check.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import anyio
from nats.js import api
from nats.js.errors import APIError, BucketNotFoundError, NotFoundError

from protocols import Stream, Verb, objects_bucket, plans_bucket, runs_bucket, stream_name, subject

from ..config import Settings, TeamConfig
from .core import TRANSIENT
from .errors import ProvisionError
from .sources import WorkQueue, consumer_config

log = logging.getLogger(__name__)

DUPLICATE_WINDOW = 120.0
"""Seconds within which a re-published ``Nats-Msg-Id`` is recognised as the same task."""

TRANSIENT_ERR_CODES = frozenset({10008, 10118})
"""JetStream error codes that pass on their own: "JetStream system temporarily
unavailable" and "stream is offline" (a cluster electing leaders or missing a node)."""
STREAM_NAME_IN_USE = 10058
"""``add_stream`` lost a race: someone created the stream meanwhile."""

INSUFFICIENT_RESOURCES = 10047
"""The server cannot reserve a stream's ``max_bytes`` within its JetStream storage limit."""

_COMPARED = ("description", "subjects", "max_age", "max_bytes", "discard", "max_msg_size",
             "max_msgs_per_subject", "num_replicas", "duplicate_window", "allow_direct")
"""Stream settings provisioning owns: an existing stream is updated when one differs."""


_RETENTION = {Stream.WORK: api.RetentionPolicy.WORK_QUEUE,
              Stream.RESULTS: api.RetentionPolicy.INTEREST}
"""Streams whose messages go once read; the others keep theirs until they age out."""

ERROR_BYTES = 64 * 1024
"""Largest error report the errors stream takes (an ``actor.error`` is a few hundred bytes
and a traceback's tail)."""
ROLE_SHARE = 8
"""One role's subject of the error and dead-letter streams holds at most 1/8 of them..."""
ROLE_FLOOR = 64
"""... but never fewer than 64 messages (a stream made small holds less per role)."""
NATS_MAX_PAYLOAD = 1024 * 1024
"""nats-server's default largest message, for a stream whose messages are not limited."""
HEADERS_ROOM = 16 * 1024
"""Bytes of headers a stored message may carry beyond ``PLANCAST_MAX_MESSAGE_BYTES``."""


@dataclass(frozen=True)
class Retry:
    """How long provisioning keeps trying through transient failures, and how it backs off."""

    deadline: float = 30.0
    """Seconds from the start of ``provision`` after which a still-failing step is an error."""
    first_delay: float = 0.1
    """Seconds before the first retry; doubled after each failure."""
    max_delay: float = 2.0
    """Longest pause between two attempts."""


def is_transient(exc: BaseException) -> bool:
    """True for failures that pass on their own: timeouts, no responders, reconnects, 503s."""
    if isinstance(exc, TRANSIENT):
        return True
    # nats-py's KeyValue errors are APIErrors made without a code: read them with getattr
    return isinstance(exc, APIError) and (getattr(exc, "code", None) == 503
                                           or getattr(exc, "err_code", None) in TRANSIENT_ERR_CODES)


def stream_configs(
    prefix: str, *, replicas: int, event_max_age: float, max_msg_size: int, max_bytes: int = -1
) -> list[api.StreamConfig]:
    """The desired stream configurations, one per ``Stream`` kind.

    Every stream is bounded by ``max_age`` and ``max_bytes``. A full work stream refuses
    what is sent (the sender sees the error); so does a full results stream, which keeps
    an outcome only where a run's planner reads (interest retention: a result for a run
    nobody drives is acknowledged and dropped by the server, never stored). Full event,
    error, dead-letter and finished streams drop their oldest messages; errors and dead
    letters keep at most ``per_role`` messages on each role's subject, so one role's flood
    pushes out only its own. The finished stream keeps one record per attempt, as long as
    the events (``event_max_age``), in the deployment's replicas.
    """
    configs = []
    for kind in Stream:
        size = ERROR_BYTES if kind is Stream.ERRORS else max_msg_size
        configs.append(
            api.StreamConfig(
                name=stream_name(prefix, kind),
                description=f"plancast {kind.name.lower()} for prefix {prefix!r}",
                subjects=kind.subjects(prefix),
                retention=_RETENTION.get(kind, api.RetentionPolicy.LIMITS),
                storage=api.StorageType.FILE,
                num_replicas=replicas,
                # (the server takes no window longer than the messages are kept)
                duplicate_window=min(DUPLICATE_WINDOW, event_max_age or DUPLICATE_WINDOW),
                # Tasks nobody pulls (a role nobody serves) and outcomes that reach a run
                # after it ended have no reader left: they age out.
                max_age=event_max_age,
                max_bytes=max_bytes,
                discard=api.DiscardPolicy.NEW if kind in _RETENTION else api.DiscardPolicy.OLD,
                max_msg_size=size,
                max_msgs_per_subject=per_role(max_bytes, size)
                if kind in (Stream.ERRORS, Stream.DEAD) else 1 if kind is Stream.FINISHED
                else -1,
                # A finished attempt's record is read by the subject that names it (the
                # server lets a role read only its own role's records).
                allow_direct=kind is Stream.FINISHED or None,
            )
        )
    return configs


def per_role(max_bytes: int, message_bytes: int) -> int:
    """Messages one role's subject of an error or dead-letter stream keeps: at most a
    ``ROLE_SHARE``-th of the stream's bytes in messages of the largest size."""
    if max_bytes <= 0:
        return -1
    largest = message_bytes if message_bytes > 0 else NATS_MAX_PAYLOAD
    return max(ROLE_FLOOR, max_bytes // (ROLE_SHARE * largest))


async def provision(
    js: Any, prefix: str, *, replicas: int = 1, event_max_age: float = 7 * 86400.0,
    max_msg_size: int = -1, max_bytes: int = -1, retry: Retry | None = None,
    where: str = "NATS",
) -> None:
    """Make the deployment's streams, run-state bucket and object store exist as configured.

    Idempotent: what exists with the right settings is left alone, a stream whose
    settings differ (new subjects from a newer version, say) is updated. ``where`` names
    the server(s) in errors.
    """
    retry = retry or Retry()
    until = anyio.current_time() + retry.deadline
    steps: list[tuple[str, Callable[[], Awaitable[None]]]] = [
        (f"stream {config.name}", partial(_ensure_stream, js, config))
        for config in stream_configs(
            prefix, replicas=replicas, event_max_age=event_max_age,
            max_msg_size=max_msg_size, max_bytes=max_bytes)
    ]
    steps.append((f"key-value bucket {runs_bucket(prefix)}",
                  partial(_ensure_runs_bucket, js, prefix, replicas)))
    steps.append((f"key-value bucket {plans_bucket(prefix)}",
                  partial(_ensure_plans_bucket, js, prefix, replicas)))
    steps.append((f"object store {objects_bucket(prefix)}",
                  partial(_ensure_object_store, js, prefix, replicas, event_max_age, max_bytes)))
    for what, step in steps:
        await _retrying(what, step, retry, until, where)


async def _retrying(what: str, step: Callable[[], Awaitable[None]], retry: Retry,
                    until: float, where: str) -> None:
    delay = retry.first_delay
    while True:
        try:
            await step()
            return
        except ProvisionError:
            raise
        except Exception as exc:
            if isinstance(exc, APIError) and exc.err_code == INSUFFICIENT_RESOURCES:
                raise ProvisionError(
                    f"cannot create or update {what} on {where}: the server cannot reserve "
                    "its max_bytes; lower PLANCAST_MAX_STREAM_BYTES or raise the server's "
                    "jetstream max_file_store") from exc
            if not is_transient(exc):
                raise ProvisionError(
                    f"cannot create or update {what} on {where}: {_describe(exc)}; check "
                    "PLANCAST_REPLICAS against the cluster's size and the server's JetStream "
                    "limits"
                ) from exc
            left = until - anyio.current_time()
            if left <= 0:
                raise ProvisionError(
                    f"cannot create or update {what} on {where}: JetStream still failing after "
                    f"{retry.deadline:g}s ({_describe(exc)}); check that the server runs with "
                    "JetStream enabled and, on a cluster, that most nodes are up"
                ) from exc
            pause = min(delay, left)
            log.log(logging.INFO if delay == retry.first_delay else logging.DEBUG,
                    "provisioning %s failed (%s); retrying for up to %.0fs more", what,
                    _describe(exc), left)
            await anyio.sleep(pause)
            delay = min(delay * 2, retry.max_delay)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, APIError):
        if exc.code is None:  # nats-py's stand-in for "no responders"
            return "no JetStream answered"
        return f"{exc.description or type(exc).__name__} (code {exc.code}, error {exc.err_code})"
    return str(exc) or type(exc).__name__


def _differences(current: api.StreamConfig, desired: api.StreamConfig) -> list[str]:
    have: dict[str, Any] = current.as_dict()
    want: dict[str, Any] = desired.as_dict()
    changed = []
    for key in _COMPARED:
        old, new = have.get(key), want.get(key)
        if key == "subjects":
            old, new = sorted(old or []), sorted(new or [])
        else:
            old, new = old or 0, new or 0
        if old != new:
            changed.append(key)
    return changed


async def _ensure_stream(js: Any, config: api.StreamConfig) -> None:
    try:
        info = await js.stream_info(config.name)
    except NotFoundError:
        try:
            await js.add_stream(config)
            log.debug("created stream %s", config.name)
            return
        except APIError as exc:
            if exc.err_code != STREAM_NAME_IN_USE:
                raise
            info = await js.stream_info(config.name)  # created meanwhile, by another process
    if _retention(info.config) != _retention(config):
        await _recreate(js, config, info)
        return
    if changed := _differences(info.config, config):
        await js.update_stream(config)
        log.info("updated stream %s: %s", config.name, ", ".join(changed))


async def _recreate(js: Any, config: api.StreamConfig, info: api.StreamInfo) -> None:
    """A stream kept with another retention (outcomes were a work queue before they were
    kept by interest): the server cannot change that in place, so an empty one is made
    anew; one holding messages is left for its readers to drain first."""
    old, new = _retention(info.config), _retention(config)
    if info.state.messages:
        raise ProvisionError(
            f"stream {config.name} keeps its {info.state.messages} messages with {old} "
            f"retention, this version with {new}, which the server cannot change in place: "
            "stop the workers, let the planners drain it, then provision again")
    await js.delete_stream(config.name)
    await js.add_stream(config)
    log.warning("made stream %s anew: retention %s, was %s", config.name, new, old)


def _retention(config: api.StreamConfig) -> str:
    return api.RetentionPolicy(config.retention or "limits").value


async def _ensure_runs_bucket(js: Any, prefix: str, replicas: int) -> None:
    try:
        await js.key_value(runs_bucket(prefix))
    except BucketNotFoundError:
        await js.create_key_value(
            api.KeyValueConfig(
                bucket=runs_bucket(prefix),
                description="plancast run state (written with compare-and-set)",
                history=5,
                replicas=replicas,
                storage=api.StorageType.FILE,
            )
        )


async def _ensure_plans_bucket(js: Any, prefix: str, replicas: int) -> None:
    try:
        await js.key_value(plans_bucket(prefix))
    except BucketNotFoundError:
        await js.create_key_value(api.KeyValueConfig(
            bucket=plans_bucket(prefix), description="plancast plans saved by name",
            history=5, replicas=replicas, storage=api.StorageType.FILE))


async def _ensure_object_store(js: Any, prefix: str, replicas: int, ttl: float,
                               max_bytes: int) -> None:
    """The object store's stream, read only by direct gets that name a chunk's subject (so
    the server's permissions say who reads what: ``protocols.objects``) and taking no
    rollup header (a rollup of the whole stream, sent by anyone who may write a chunk,
    would erase every run's objects)."""
    bucket = objects_bucket(prefix)
    config = api.StreamConfig(
        name=f"OBJ_{bucket}", description="plancast payloads too large for a message",
        subjects=[f"$O.{bucket}.C.>", f"$O.{bucket}.M.>"], max_age=ttl, max_bytes=max_bytes,
        num_replicas=replicas, storage=api.StorageType.FILE, discard=api.DiscardPolicy.NEW,
        allow_direct=True, allow_rollup_hdrs=False)
    try:
        info = await js.stream_info(config.name)
    except NotFoundError:
        await _ensure_stream(js, config)
        return
    if not info.config.allow_direct or info.config.allow_rollup_hdrs:
        await js.update_stream(replace(info.config, allow_direct=True, allow_rollup_hdrs=False))
        log.info("updated stream %s: direct reads by subject, no rollups", config.name)


async def check_provisioned(js: Any, prefix: str, *, where: str = "NATS") -> None:
    """For a user without provisioning rights: every stream must exist already."""
    for config in stream_configs(prefix, replicas=1, event_max_age=0, max_msg_size=-1):
        await _exists(js, str(config.name), where)
    await _exists(js, f"KV_{runs_bucket(prefix)}", where)
    await _exists(js, f"OBJ_{objects_bucket(prefix)}", where)


async def _exists(js: Any, stream: str, where: str) -> None:
    try:
        await js.stream_info(stream)
    except NotFoundError:
        raise ProvisionError(f"stream {stream} does not exist on {where}: run `plancast "
                             "provision` with the admin's credentials first") from None


def team_queues(prefix: str, team: TeamConfig) -> list[WorkQueue]:
    """The durable consumers a team's roles pull from, one per role (shared by its
    instances)."""
    queues = []
    for role in team.roles.values():
        match role.kind:
            case "planner":
                continue
            case "critic":
                queues.append(WorkQueue(Stream.WORK, subject(prefix, Verb.REVIEW), "review"))
            case "synthesizer":
                if role.name not in team.dedicated_synthesizers():
                    queues.append(WorkQueue(Stream.WORK, subject(prefix, Verb.SYNTHESIS),
                                            "synthesis"))
                queues.append(WorkQueue(Stream.WORK, subject(prefix, Verb.SYNTHESIS_FOR,
                                                             role.name),
                                        f"synthesis-{role.name}"))
            case "supervisor":
                queues.append(WorkQueue(Stream.DEAD, subject(prefix, Verb.DEAD, wildcard=True),
                                        role.name))
            case _:
                queues.append(WorkQueue(Stream.WORK, subject(prefix, Verb.STEP, role.name),
                                        f"step-{role.name}"))
    return queues


async def provision_consumers(js: Any, team: TeamConfig, settings: Settings) -> list[str]:
    """Create (or update) the consumers of the team's roles, so that workers whose users
    may not create consumers can bind to them; returns their names."""
    names = []
    for queue in team_queues(settings.prefix, team):
        await js.add_consumer(stream_name(settings.prefix, queue.stream),
                              config=consumer_config(queue, settings))
        names.append(queue.consumer)
    return names
