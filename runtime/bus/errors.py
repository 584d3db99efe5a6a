"""What goes wrong on the bus, by name: plancast's own errors (each message says what to do)
and the NATS client's that code outside ``bus/`` catches, re-exported under their own names
so that only ``bus/`` imports nats."""

from __future__ import annotations

from nats.errors import ConnectionClosedError as ConnectionClosedError
from nats.errors import NoRespondersError as NoRespondersError
from nats.js.errors import APIError as APIError
from nats.js.errors import BucketNotFoundError as BucketNotFoundError
from nats.js.errors import KeyNotFoundError as KeyNotFoundError
from nats.js.errors import KeyWrongLastSequenceError as KeyWrongLastSequenceError
from nats.js.errors import NotFoundError as NotFoundError

from ..errors import PlancastError, SetupError


class Fenced(PlancastError):
    """A fenced publish was refused: the fence subject moved on (someone else took over)."""


class StorageFull(PlancastError):
    """A stream (or the object store) is at its ``max_bytes``: waiting will not help."""


class ObjectRefused(PlancastError, ValueError):
    """An object reference that is not fetched, or an object that is not what it says."""


class InsecureFile(PlancastError):
    """A private file or directory is not ours, or others may read or change it."""


class ProvisionError(PlancastError):
    """The deployment's streams or buckets could not be created or updated."""


class NatsUnreachable(PlancastError, ConnectionError):
    """No NATS server at the configured URL(s) let us connect within the connect timeout."""


class PublishRefused(PlancastError):
    """The server refused a publish of ours: this connection's user may not publish there."""


class MissingConsumer(SetupError):
    """A role's consumer does not exist and its NATS user may not create it."""


class NatsServerNotFound(PlancastError):
    """No nats-server binary where we look for one."""


class NatsServerStartError(PlancastError):
    """nats-server exited or did not become ready; the message ends with its log."""


class StoreInUse(PlancastError):
    """Another process runs (or is starting) an embedded server on this store."""


class ConsumerGone(PlancastError):
    """The server says the consumer went away (deleted, or its leader changed): bind again."""


class CredsError(PlancastError):
    """A credentials file is missing, unreadable or lacks a user and password."""
