"""Settings from flags, the environment (``NATS_URL``, ``PLANCAST_*``) and a ``.env`` file."""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from protocols import DEFAULT_PREFIX, validate_prefix


def default_data_dir() -> Path:
    """``$XDG_DATA_HOME/plancast`` or ``~/.local/share/plancast``: the embedded server's store."""
    import os

    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "plancast"


class Settings(BaseSettings):
    """Everything a plancast process needs to join a deployment.

    Names follow the ``nats`` CLI where it has one (``NATS_URL``, ``NATS_CREDS``,
    ``NATS_USER`` ...); the rest are ``PLANCAST_<NAME>``.
    """

    model_config = SettingsConfigDict(
        env_prefix="PLANCAST_", env_file=".env", extra="ignore", populate_by_name=True
    )

    nats_url: str | None = Field(
        default=None, validation_alias=AliasChoices("nats_url", "NATS_URL", "PLANCAST_NATS_URL")
    )
    """Comma-separated server URLs; None starts an embedded nats-server."""
    creds: Path | None = Field(
        default=None, validation_alias=AliasChoices("creds", "NATS_CREDS", "PLANCAST_CREDS")
    )
    """A NATS credentials file (JWT + nkey seed)."""
    user: str | None = Field(default=None, validation_alias=AliasChoices("user", "NATS_USER"))
    password: str | None = Field(
        default=None, validation_alias=AliasChoices("password", "NATS_PASSWORD")
    )
    token: str | None = Field(default=None, validation_alias=AliasChoices("token", "NATS_TOKEN"),
                              repr=False)
    """The server's token. For the local deployment (no URL given) plancast fills in the
    secret of its store (``<data_dir>/nats/deployment.secret``), whatever was set here."""
    secret: str | None = Field(default=None, repr=False)
    """The planners' shared secret (``PLANCAST_SECRET``): the key of task nonces and of the
    ids of the planner's messages (``runtime.nonces``). Default: the ``secret`` in a
    planner's credentials from ``plancast auth init``, else ``token``."""
    tls_ca: Path | None = Field(default=None, validation_alias=AliasChoices("tls_ca", "NATS_CA"))
    tls_cert: Path | None = Field(
        default=None, validation_alias=AliasChoices("tls_cert", "NATS_CERT")
    )
    tls_key: Path | None = Field(default=None, validation_alias=AliasChoices("tls_key", "NATS_KEY"))

    prefix: str = DEFAULT_PREFIX
    """Subject prefix; deployments sharing a NATS server stay apart by prefix."""
    data_dir: Path = Field(default_factory=default_data_dir)
    """Where the embedded nats-server keeps JetStream data, its URL and its secret (0700)."""
    replicas: int = Field(default=1, ge=1, le=5)
    """JetStream replicas for streams and buckets (3 on a three-node cluster)."""
    roles_file: Path | None = None
    """A TOML file configuring roles (name, system prompt, model, tools, concurrency)."""

    max_message_bytes: int = Field(default=512 * 1024, ge=1024)
    """Largest message an actor accepts; larger outputs travel through the object store."""
    max_object_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    """Largest payload sent through the object store (an offloaded message, a step's
    output); a role's ``max_object_bytes`` in the team file may lower it for what that
    role sends. A reference naming more is refused before anything is fetched."""
    ack_wait: float = Field(default=30.0, gt=0)
    """Seconds before unacknowledged work is redelivered (kept alive by in-progress acks)."""
    max_deliver: int = Field(default=5, ge=1)
    """Deliveries of one task before it goes to the dead-letter path."""
    ping_interval: float = Field(default=10.0, gt=0)
    """Seconds between a client's pings to its server; ``max_outstanding_pings`` unanswered
    ones mean the connection is dead (a cut network path sends no reset) and it reconnects."""
    max_outstanding_pings: int = Field(default=3, ge=1)
    """Pings left unanswered before the connection is given up and another server tried."""
    heartbeat_interval: float = Field(default=2.0, gt=0)
    """Seconds between an actor's heartbeats."""
    claim_after: float = Field(default=0.1, ge=0)
    """Seconds an executor runs a step before it sends the step's claim; a step that ends
    sooner claims it in its result (one message instead of two). A tenth of a second: a
    quick tool call sends one message, and a person watching sees ``step.started`` no
    later than they can tell; the planner's heartbeat watch starts that much later."""
    event_batch: int = Field(default=512, ge=1)
    """Most events a planner stores in one message (an ``event.batch``: the events of one
    moment); 1 sends every event alone, as plancast did before batches, for subscribers
    and planners of an older version during a rolling upgrade."""
    outcome_batch: int = Field(default=256, ge=1)
    """Most claims and results of one run an executor stores in one message (a
    ``step.outcomes``: those of one moment); 1 sends every one alone, for planners of an
    older version during a rolling upgrade (upgrade planners first)."""
    drain_timeout: float = Field(default=20.0, ge=0)
    """Seconds an actor waits for in-flight work on shutdown before handing it back."""
    connect_timeout: float = Field(default=5.0, gt=0)
    """Seconds the first connection to NATS may take before the process gives up with an
    error (once connected, reconnects go on for as long as the process runs)."""
    publish_retry_for: float = Field(default=30.0, ge=0)
    """Seconds a de-duplicated publish, or provisioning at start-up, is retried through a
    failover before giving up."""
    max_restarts: int = Field(default=5, ge=0)
    """Crashes of a process's actors tolerated within ``restart_period`` before it gives up."""
    restart_period: float = Field(default=60.0, gt=0)
    """Seconds over which ``max_restarts`` is counted."""
    run_lease: float = Field(default=10.0, gt=0)
    """Seconds a planner's hold on a run lasts unless renewed; then another planner takes over."""
    event_max_age: float = Field(default=7 * 24 * 3600.0, gt=0)
    """How long progress events stay replayable (and queued tasks, outcomes and stored
    payloads are kept at most)."""
    max_stream_bytes: int = Field(default=256 * 1024 * 1024, ge=-1)
    """Bytes each of the deployment's streams and its object store may hold (-1: no limit).
    The server reserves it per stream. Full work and results streams refuse new messages;
    the events and dead-letter streams drop their oldest."""

    gateway_token: str | None = Field(default=None, repr=False)
    """The token every request to ``plancast serve`` carries (``Authorization: Bearer``);
    None: the one kept in ``gateway.token`` in ``data_dir``, made at the first start."""

    tracing: bool = False
    """Record OpenTelemetry spans (the ``otel`` extra); the standard ``OTEL_*`` variables
    (an exporter or an OTLP endpoint) turn it on too. See ``runtime.telemetry``."""

    @field_validator("prefix")
    @classmethod
    def _valid_prefix(cls, value: str) -> str:
        return validate_prefix(value)
