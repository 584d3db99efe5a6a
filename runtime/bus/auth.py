"""Per-role NATS users: who may publish and subscribe where, as a nats-server configuration
and one credentials file per user (a NATS context, which other NATS clients read too).

Least privilege, checked by the server rather than by us: a role's user publishes its
outcomes only on ``result.*.<role>``, pulls and acknowledges only its own consumer, and
has no JetStream API right that changes anything (no stream or consumer is created,
updated, purged or deleted by it: ``plancast provision`` does that as ``admin``). Only
the planner writes tasks, events, fences and run state, and tells an executor role to stop
an attempt it gave up (``stop.<role>``: only that role hears it). ``client`` submits runs and
follows them; ``watcher`` only reads. Every user gets its own inbox prefix
(``_INBOX_<user>``), so nobody reads another user's replies or pulled messages.

A payload sent by reference is kept under the subject of its message
(``protocols.objects``), and a user reads and writes objects only where it may read and
send those messages: a role reads its own tasks' objects, writes its own results'; the
planner reads and writes all; ``client`` and ``watcher`` read the events'. An executor
role writes and reads back the records of the attempts it finished
(``finished.<role>.…``), never another role's. No role may ask
for stream information (it lists runs, keys and object names): a role checks only its own
consumer.

One gap the server leaves open (nats-server#8274): a user allowed to create a consumer can
have it deliver stored messages to any subject. Only the planner, ``client``, ``watcher``
and a team lead create consumers, on the streams they read; what they can redirect is the
planner's own records and events, never bytes of their choosing. Roles create none
(offloaded payloads are read chunk by chunk).
"""

from __future__ import annotations

import json
import secrets
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from protocols import Stream, chunks_of, objects_bucket, plans_bucket, runs_bucket, stream_name

from ..config import TEAM_KIND, TeamConfig
from .errors import CredsError

CONF_FILE = "nats-auth.conf"
"""The server configuration's ``authorization`` block, for nats-server's ``include``."""
DEFAULT_URL = "nats://localhost:4222"
"""nats-server's own default address, written when ``auth init`` is not told the server's."""
ADMIN, CLIENT, WATCHER = "admin", "client", "watcher"


@dataclass(frozen=True)
class Grant:
    """What one user may do: subjects it may publish to and subscribe on."""

    publish: list[str]
    subscribe: list[str]
    responses: bool = False
    """May answer requests sent to it (the planner answers ``run.submit``)."""
    provisions: bool = False
    """Creates and updates streams and consumers (only ``admin``)."""

    @property
    def checks_streams(self) -> bool:
        """May ask for stream information, so checks at start that the streams exist (a
        role's user may not: it checks its own consumer when it binds)."""
        return self.provisions or any(s.startswith("$JS.API.STREAM.INFO.") for s in self.publish)


@dataclass(frozen=True)
class Names:
    """The JetStream names of one deployment."""

    prefix: str
    work: str = field(init=False)
    results: str = field(init=False)
    events: str = field(init=False)
    errors: str = field(init=False)
    dead: str = field(init=False)
    finished: str = field(init=False)
    kv: str = field(init=False)
    objects: str = field(init=False)
    plans: str = field(init=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        for kind in Stream:
            set_(self, kind.name.lower(), stream_name(self.prefix, kind))
        set_(self, "kv", f"KV_{runs_bucket(self.prefix)}")
        set_(self, "objects", f"OBJ_{objects_bucket(self.prefix)}")
        set_(self, "plans", f"KV_{plans_bucket(self.prefix)}")

    @property
    def streams(self) -> list[str]:
        return [self.work, self.results, self.events, self.errors, self.dead, self.finished,
                self.kv, self.objects]


def _consumer(stream: str, name: str) -> list[str]:
    """Bind to, pull from and acknowledge one existing durable consumer."""
    return [f"$JS.API.CONSUMER.INFO.{stream}.{name}", f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{name}",
            f"$JS.ACK.{stream}.{name}.>"]


def _consumers(stream: str) -> list[str]:
    """Create, read and remove consumers of one stream (and read through them)."""
    return [f"$JS.API.CONSUMER.{verb}.{stream}.>"
            for verb in ("CREATE", "DURABLE.CREATE", "INFO", "DELETE", "MSG.NEXT")] \
        + [f"$JS.API.CONSUMER.CREATE.{stream}", f"$JS.ACK.{stream}.>", f"$JS.FC.{stream}.>"]


def _reads(stream: str) -> list[str]:
    """Read stored messages one by one."""
    return [f"$JS.API.STREAM.MSG.GET.{stream}", f"$JS.API.DIRECT.GET.{stream}",
            f"$JS.API.DIRECT.GET.{stream}.>"]


def _objects(n: Names, *spaces: str) -> list[str]:
    """Read the objects kept in these spaces (``protocols.objects``), and no others: a
    direct get names the subject it reads, a stream get (by sequence) does not."""
    return [f"$JS.API.DIRECT.GET.{n.objects}.{chunks_of(n.prefix, space)}" for space in spaces]


def _finished(n: Names, role: str) -> list[str]:
    """Write and read back the records of the attempts this role finished, and no other
    role's: a direct get names the subject it reads."""
    p = n.prefix
    return [f"{p}.finished.{role}.>", f"$JS.API.DIRECT.GET.{n.finished}.{p}.finished.{role}.>",
            chunks_of(p, f"finished.{role}"), *_objects(n, f"finished.{role}")]


def _actor(n: Names, role: str, stream: str, consumer: str, reads: list[str]) -> list[str]:
    """What every actor publishes: its heartbeats, error reports, dead letters, outcomes
    and their large payloads (in its outcomes' spaces); reads of the objects in ``reads``
    (its tasks' spaces); its own consumer."""
    p = n.prefix
    return [f"{p}.heartbeat.{role}.*", f"{p}.error.{role}", f"{p}.dead.{role}",
            f"{p}.result.*.{role}", chunks_of(p, f"result.*.{role}"),
            chunks_of(p, f"error.{role}"), "$JS.API.INFO", *_objects(n, *reads),
            *_consumer(stream, consumer)]


def grants(prefix: str, team: TeamConfig) -> dict[str, Grant]:
    """Every user of a deployment and what it may do, by user name."""
    n, p = Names(prefix), prefix
    if taken := {ADMIN, CLIENT, WATCHER} & team.roles.keys():
        raise CredsError(f"role names {sorted(taken)} are taken by plancast's own NATS users: "
                         "rename those roles in the team file")
    users: dict[str, Grant] = {ADMIN: Grant([">"], [">"], responses=True, provisions=True)}
    followers = [*_consumers(n.events), *_reads(n.events), *_objects(n, "event.*")]
    # Readers of the run state read the long step outputs it points to (``state.*``).
    readers = [*(f"$JS.API.STREAM.INFO.{s}" for s in n.streams), *followers,
               *_consumers(n.kv), *_reads(n.kv), *_objects(n, "state.*")]
    for role in team.roles.values():
        inbox = [f"_INBOX_{role.name}.>"]
        if role.kind == "planner":
            users[role.name] = Grant([
                f"{p}.step.*", f"{p}.review", f"{p}.synthesis", f"{p}.synthesis-for.*",
                f"{p}.event.*", f"{p}.fence.*", f"{p}.stop.*",
                f"{p}.heartbeat.{role.name}.*", f"{p}.error.*", f"{p}.result.*.{role.name}",
                f"{p}.dead.{role.name}", f"$KV.{runs_bucket(p)}.>", f"$O.{objects_bucket(p)}.>",
                *(f"$JS.API.STREAM.INFO.{s}" for s in n.streams),
                *_consumers(n.results), *_consumers(n.kv), *_consumers(n.events),
                f"$JS.API.CONSUMER.INFO.{n.work}.*", f"$JS.API.STREAM.MSG.DELETE.{n.work}",
                *_reads(n.kv), *_reads(n.events), *_reads(n.objects),
            ], [f"{p}.run.submit", f"{p}.run.resubmit", f"{p}.heartbeat.>", *inbox],
                responses=True)
        elif role.kind == "supervisor":
            users[role.name] = Grant([  # it reads dead tasks, of every role
                *_actor(n, role.name, n.dead, role.name,
                        ["step.*", "review", "synthesis", "synthesis-for.*"]),
                f"$JS.API.STREAM.MSG.GET.{n.work}", f"$JS.API.STREAM.MSG.DELETE.{n.work}",
            ], [f"{p}.heartbeat.>", f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{n.work}.*",
                f"{p}.error.{role.name}", *inbox])
        elif role.kind == TEAM_KIND:  # a team lead submits child runs and follows events
            users[role.name] = Grant([
                *_actor(n, role.name, n.work, f"step-{role.name}", [f"step.{role.name}"]),
                f"{p}.run.submit", f"{p}.run.resubmit", *followers],
                [f"{p}.error.{role.name}", *inbox])
        else:
            consumer, tasks = {
                "critic": ("review", ["review"]),
                "synthesizer": ("synthesis", ["synthesis", f"synthesis-for.{role.name}"]),
            }.get(role.kind, (f"step-{role.name}", [f"step.{role.name}"]))
            own = _consumer(n.work, f"synthesis-{role.name}") \
                if role.kind == "synthesizer" else []  # a sub-team's runs may name it
            hears = [f"{p}.error.{role.name}", *inbox]
            if role.kind not in ("critic", "synthesizer"):
                own = _finished(n, role.name)
                hears.append(f"{p}.stop.{role.name}")  # attempts its planner gave up
            users[role.name] = Grant([*_actor(n, role.name, n.work, consumer, tasks), *own],
                                     hears)
    plans = [f"$JS.API.STREAM.INFO.{n.plans}", *_consumers(n.plans), *_reads(n.plans)]
    users[CLIENT] = Grant([f"{p}.run.submit", f"{p}.run.resubmit", f"{p}.result.*.{CLIENT}",
                           chunks_of(p, f"result.*.{CLIENT}"), *readers, *plans,
                           f"$KV.{plans_bucket(p)}.>"],
                          [f"{p}.heartbeat.>", f"_INBOX_{CLIENT}.>"])
    users[WATCHER] = Grant([*readers, *plans], [f"{p}.heartbeat.>", f"_INBOX_{WATCHER}.>"])
    return users


def server_conf(users: dict[str, tuple[Grant, str]]) -> str:
    """nats-server's ``authorization`` block for these users and passwords."""
    q = json.dumps
    lines = ["authorization {", "  users = ["]
    for name, (grant, password) in users.items():
        lines += [f"    {{user: {q(name)}, password: {q(password)}, permissions: {{",
                  f"      publish: {{allow: {q(grant.publish)}}}",
                  f"      subscribe: {{allow: {q(grant.subscribe)}}}"]
        if grant.responses:
            lines.append("      allow_responses: true")
        lines.append("    }}")
    return "\n".join([*lines, "  ]", "}", ""])


def creds_file(directory: Path, user: str) -> Path:
    """Where ``write_auth`` puts ``user``'s credentials: a NATS context file (below)."""
    return directory / f"{user}.json"


def write_auth(directory: Path, prefix: str, team: TeamConfig,
               url: str = DEFAULT_URL) -> list[Path]:
    """Write the server's ``nats-auth.conf`` and a credentials file per user, readable by
    their owner only; returns the files written.

    A user's file is a NATS context (the ``nats`` CLI's format, ADR-21): ``url``, ``user``,
    ``password`` and ``inbox_prefix`` are all any NATS client needs (``nats --context
    FILE``, or the four values given to nats.js, nats.py ...); plancast's own settings sit
    apart under ``plancast``, which other readers ignore.
    """
    directory.mkdir(parents=True, exist_ok=True)
    users = {name: (grant, secrets.token_urlsafe(24))
             for name, grant in grants(prefix, team).items()}
    planners = {r.name for r in team.roles.values() if r.kind == "planner"}
    shared = secrets.token_urlsafe(32)  # the planners' key of nonces and message ids
    written = [_private(directory / CONF_FILE, server_conf(users))]
    for name, (grant, password) in users.items():
        own: dict[str, object] = {"prefix": prefix, "provision": grant.provisions,
                                  "check_streams": grant.checks_streams}
        if name in planners | {ADMIN}:
            own["secret"] = shared
        context = {
            "description": f"plancast: NATS user {name!r} of prefix {prefix!r} "
                           "(plancast auth init); plancast --creds FILE, nats --context FILE",
            "url": url, "user": name, "password": password,
            "inbox_prefix": inbox_prefix(name), "plancast": own}
        written.append(_private(creds_file(directory, name),
                                json.dumps(context, indent=2) + "\n"))
    return written


def inbox_prefix(user: str) -> str:
    """The inbox prefix of a user of ``auth init``: its replies and pulled messages come
    there, and nobody else may read them."""
    return f"_INBOX_{user}"


def _private(path: Path, text: str) -> Path:
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(text)
    return path


@dataclass(frozen=True)
class UserCreds:
    """A user and password for NATS: a context file of ``write_auth`` (or any NATS context
    with a user), or the TOML file ``auth init`` wrote before."""

    user: str
    password: str
    provision: bool
    check_streams: bool = True
    """May look at the streams, so checks at start that they exist (files written before
    this line existed: every user could)."""
    secret: str = ""
    """The planners' shared secret (``runtime.nonces``); empty for every other user."""
    inbox_prefix: str | None = None
    """Where its replies come; None: the client's default."""


def read_creds(path: Path) -> UserCreds | None:
    """The user in a credentials file of ``auth init`` or a NATS context file; None for a
    NATS (JWT) credentials file, which nats-py reads itself."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise CredsError(f"cannot read credentials file {path}: {exc.strerror}") from exc
    if "BEGIN NATS USER JWT" in text:
        return None
    if text.lstrip().startswith("{"):
        return _from_context(path, text)
    try:  # the TOML file of earlier versions: user, password and plancast's own fields
        data = tomllib.loads(text)
        return UserCreds(str(data["user"]), str(data["password"]), bool(data.get("provision")),
                         bool(data.get("check_streams", True)), str(data.get("secret", "")),
                         inbox_prefix(str(data["user"])))
    except (tomllib.TOMLDecodeError, KeyError) as exc:
        raise CredsError(f"{path} is neither a NATS credentials or context file nor one "
                         "written by `plancast auth init` (user, password)") from exc


def _from_context(path: Path, text: str) -> UserCreds:
    """A NATS context (ADR-21) with a user and password; plancast's fields under
    ``plancast``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CredsError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg}): write "
                         "it again with `plancast auth init --force`") from exc
    own = data.get("plancast") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not data.get("user") or not isinstance(own or {}, dict):
        raise CredsError(f"{path} is a NATS context without a user and password: plancast "
                         "takes those, or a NATS .creds file (JWT)")
    own = own or {}
    return UserCreds(str(data["user"]), str(data.get("password", "")),
                     bool(own.get("provision")), bool(own.get("check_streams", True)),
                     str(own.get("secret", "")), data.get("inbox_prefix") or None)
