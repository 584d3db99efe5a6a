"""Create or update the streams and buckets a deployment needs; safe to run on every start."""

from __future__ import annotations

import logging
from typing import Any

from nats.js import api
from nats.js.errors import BucketNotFoundError, NotFoundError

from protocols import Stream, objects_bucket, runs_bucket, stream_name

log = logging.getLogger(__name__)

DUPLICATE_WINDOW = 120.0
"""Seconds within which a re-published ``Nats-Msg-Id`` is recognised as the same task."""


def stream_configs(
    prefix: str, *, replicas: int, event_max_age: float, max_msg_size: int
) -> list[api.StreamConfig]:
    """The desired stream configurations, one per ``Stream`` kind."""
    configs = []
    for kind in Stream:
        work = kind in (Stream.WORK, Stream.RESULTS)
        configs.append(
            api.StreamConfig(
                name=stream_name(prefix, kind),
                description=f"plancast {kind.name.lower()} for prefix {prefix!r}",
                subjects=kind.subjects(prefix),
                retention=api.RetentionPolicy.WORK_QUEUE if work else api.RetentionPolicy.LIMITS,
                storage=api.StorageType.FILE,
                num_replicas=replicas,
                duplicate_window=DUPLICATE_WINDOW,
                max_age=None if work else event_max_age,
                max_msg_size=max_msg_size,
            )
        )
    return configs


async def provision(
    js: Any, prefix: str, *, replicas: int = 1, event_max_age: float = 7 * 86400.0,
    max_msg_size: int = -1,
) -> None:
    """Make the deployment's streams, run-state bucket and object store exist as configured."""
    for config in stream_configs(
        prefix, replicas=replicas, event_max_age=event_max_age, max_msg_size=max_msg_size
    ):
        try:
            await js.stream_info(config.name)
        except NotFoundError:
            await js.add_stream(config)
            log.debug("created stream %s", config.name)
        else:
            await js.update_stream(config)
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
    try:
        await js.object_store(objects_bucket(prefix))
    except (BucketNotFoundError, NotFoundError):
        await js.create_object_store(
            objects_bucket(prefix),
            config=api.ObjectStoreConfig(
                description="plancast payloads too large for a message",
                ttl=event_max_age,
                replicas=replicas,
                storage=api.StorageType.FILE,
            ),
        )
