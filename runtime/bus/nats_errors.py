"""What the NATS client raises that code outside ``bus/`` catches: nats-py's own classes
under their own names, so that only ``bus/`` imports nats."""

from __future__ import annotations

from nats.errors import ConnectionClosedError as ConnectionClosedError
from nats.errors import Error as NatsError
from nats.errors import NoRespondersError as NoRespondersError
from nats.js.errors import APIError as APIError
from nats.js.errors import BucketNotFoundError as BucketNotFoundError
from nats.js.errors import KeyNotFoundError as KeyNotFoundError
from nats.js.errors import KeyWrongLastSequenceError as KeyWrongLastSequenceError
from nats.js.errors import NotFoundError as NotFoundError

__all__ = (
    "APIError",
    "BucketNotFoundError",
    "ConnectionClosedError",
    "KeyNotFoundError",
    "KeyWrongLastSequenceError",
    "NatsError",
    "NoRespondersError",
    "NotFoundError",
)
