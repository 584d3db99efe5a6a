"""Subject and JetStream names, all built here from a verb and validated tokens.

No other module writes a subject by hand: a typo'd subject is a message nobody reads.
"""

from __future__ import annotations

import enum
import re

DEFAULT_PREFIX = "plancast"

_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,128}")


class InvalidSubjectToken(ValueError):
    """A subject token had a character NATS treats as structure (``.``, ``*``, ``>``, space)."""


class Verb(enum.Enum):
    """Each subject family, with the number of tokens that follow it."""

    RUN_SUBMIT = ("run.submit", 0)
    """Request/reply: submit a RunRequest, get RunAccepted or RunRejected."""
    RUN_RESUBMIT = ("run.resubmit", 0)
    """Request/reply: a submission sent again after no answer came; every planner hears it
    (no queue group), so it cannot be lost again to one planner that is cut off."""
    STEP = ("step", 1)
    """``step.<role>``: step tasks for executors of a role (work stream)."""
    REVIEW = ("review", 0)
    """Review tasks for the critic (work stream)."""
    SYNTHESIS = ("synthesis", 0)
    """Synthesis tasks for the synthesizer (work stream)."""
    SYNTHESIS_FOR = ("synthesis-for", 1)
    """``synthesis-for.<role>``: synthesis tasks of runs that name their synthesizer role (a
    sub-team's run), for that role only (work stream)."""
    RESULT = ("result", 2)
    """``result.<run_id>.<role>``: what a role sends back to a run's planner (claims, results,
    verdicts, decisions, replan requests). The role token says who may have sent it: each
    role's NATS user may publish only on its own, and the planner checks the message fits."""
    EVENT = ("event", 1)
    """``event.<run_id>``: a run's progress events (events stream, replayable)."""
    ERROR = ("error", 1)
    """``error.<role>``: ActorError reports for bad input (errors stream: a role's flood of
    them can never push a run's events or fences out)."""
    DEAD = ("dead", 1)
    """``dead.<kind>``: raw payloads no actor could handle, kept for inspection."""
    HEARTBEAT = ("heartbeat", 2)
    """``heartbeat.<role>.<instance>``: liveness (core NATS)."""
    STOP = ("stop", 1)
    """``stop.<role>``: the planner tells a role's executors to stop an attempt it gave up
    (core NATS; ``StepStop``)."""
    FENCE = ("fence", 1)
    """``fence.<run_id>``: who owns a run; its events are fenced on it (events stream)."""
    FINISHED = ("finished", 4)
    """``finished.<role>.<run_id>.<step>.<attempt>``: the result of an attempt its role
    finished, recorded before the task is acknowledged (finished stream): a task of that
    attempt that comes again gets this result again instead of a second execution."""

    def __init__(self, word: str, arity: int) -> None:
        self.word = word
        self.arity = arity


def validate_token(token: str, what: str = "token") -> str:
    """Return ``token`` if it is a safe single subject token, else raise."""
    if not _TOKEN.fullmatch(token):
        raise InvalidSubjectToken(
            f"{what} {token!r} is not a valid subject token: use 1-128 letters, digits, '_' or '-'"
        )
    return token


def validate_prefix(prefix: str) -> str:
    """A prefix is one or more tokens joined by dots (``plancast``, ``team.a``)."""
    for part in prefix.split("."):
        validate_token(part, "prefix part")
    return prefix


def subject(prefix: str, verb: Verb, *tokens: str, wildcard: bool = False) -> str:
    """Build ``<prefix>.<verb>[.<token>...]``.

    With ``wildcard=True`` the tokens may be ``*`` and the last may be ``>`` (for
    subscriptions and stream filters), and fewer tokens than the verb takes mean ``>``.
    """
    validate_prefix(prefix)
    if wildcard:
        parts = list(tokens)
        for i, tok in enumerate(parts):
            if tok == "*" or (tok == ">" and i == len(parts) - 1):
                continue
            validate_token(tok)
        if len(parts) < verb.arity and (not parts or parts[-1] != ">"):
            parts.append(">")
        return ".".join([prefix, verb.word, *parts])
    if len(tokens) != verb.arity:
        raise ValueError(f"subject {verb.word!r} takes {verb.arity} token(s), got {len(tokens)}")
    for tok in tokens:
        validate_token(tok)
    return ".".join([prefix, verb.word, *tokens])


class Stream(enum.Enum):
    """The JetStream streams a deployment uses, with the verbs each one captures."""

    WORK = ("WORK", (Verb.STEP, Verb.REVIEW, Verb.SYNTHESIS, Verb.SYNTHESIS_FOR))
    """Tasks for executors, the critic and the synthesizer (work-queue retention)."""
    RESULTS = ("RESULTS", (Verb.RESULT,))
    """Outcomes travelling back to the planner (interest retention: kept only where a run's
    planner reads, until it has)."""
    EVENTS = ("EVENTS", (Verb.EVENT, Verb.FENCE))
    """Progress events and run ownership fences (limits retention: replayable)."""
    ERRORS = ("ERRORS", (Verb.ERROR,))
    """Error reports, each role's on its own subject (limits retention, a bounded number per
    role). After ``EVENTS``: provisioning takes the subject from there before it is given
    here (two streams may not share a subject)."""
    DEAD = ("DEAD", (Verb.DEAD,))
    """Dead letters (limits retention: kept for inspection)."""
    FINISHED = ("FINISHED", (Verb.FINISHED,))
    """Each finished attempt's result, one per subject, written once (limits retention: it
    ages out with the runs' events)."""

    def __init__(self, suffix: str, verbs: tuple[Verb, ...]) -> None:
        self.suffix = suffix
        self.verbs = verbs

    def subjects(self, prefix: str) -> list[str]:
        return [subject(prefix, v, wildcard=True) if v.arity else subject(prefix, v)
                for v in self.verbs]


def stream_of(prefix: str, subj: str) -> Stream | None:
    """The stream of this prefix that stores ``subj`` (None for one no stream takes)."""
    if not subj.startswith(prefix + "."):
        return None
    word = subj[len(prefix) + 1:].split(".", 1)[0]
    return next((kind for kind in Stream if any(v.word == word for v in kind.verbs)), None)


def _name_base(prefix: str) -> str:
    return validate_prefix(prefix).replace(".", "_").upper()


def stream_name(prefix: str, stream: Stream) -> str:
    """``plancast`` → ``PLANCAST_WORK``; a dotted prefix's dots become ``_``."""
    return f"{_name_base(prefix)}_{stream.suffix}"


def runs_bucket(prefix: str) -> str:
    """The key-value bucket holding run state."""
    return f"{_name_base(prefix)}_RUNS"


def plans_bucket(prefix: str) -> str:
    """The key-value bucket holding plans saved by name (``plancast plan save --name``)."""
    return f"{_name_base(prefix)}_PLANS"


def objects_bucket(prefix: str) -> str:
    """The object store bucket holding payloads too large for a message."""
    return f"{_name_base(prefix)}_OBJECTS"
