"""Where a payload sent by reference is kept: under the subject of the message it stands
in for, so that the server lets exactly those read and write it who may read and send
that message (a task only its role and the planner, a role's result only that role and
the planner).

An object is named ``<space>/<key>``: ``space`` is the subject its message travels on
without the deployment's prefix (``step.coder``, ``review``, ``result.run-1.coder``,
``event.run-1``), ``key`` one token its writer picks. Its bytes are stored in order, in
chunks of any size up to the server's largest message, chunk ``n`` (0, 1, …) as the one
message on ``$O.<bucket>.C.<space>.<key>.<n>``; a reader asks for the last message on each
of those subjects in turn (a JetStream direct get, whose API subject names the subject it
reads: that is what the server's permissions can limit) until it has the reference's size.
"""

from __future__ import annotations

from .subjects import InvalidSubjectToken, objects_bucket, validate_token

CHUNK_BYTES = 128 * 1024
"""The size of the chunks plancast writes (any size a message may have is read)."""
STATE = "state"
"""The first token of the space of a planner's own records (a long step output), which
only planners read: ``state.<run_id>``."""


def object_space(prefix: str, subject: str) -> str:
    """The space of a message sent on ``subject``: the subject without ``<prefix>.``."""
    start = f"{prefix}."
    if not subject.startswith(start):
        raise InvalidSubjectToken(f"subject {subject!r} is not under prefix {prefix!r}")
    return _checked_space(subject[len(start):])


def state_space(run_id: str) -> str:
    """The space of the planner's own records of one run."""
    return f"{STATE}.{validate_token(run_id, 'run id')}"


def object_name(space: str, key: str) -> str:
    """The name of an object ``key`` kept in ``space``."""
    return f"{_checked_space(space)}/{validate_token(key, 'object key')}"


def space_of(name: str) -> str:
    """The space an object name says it is kept in (``InvalidSubjectToken`` for a name
    that is not ``<space>/<key>`` of subject tokens)."""
    space, _, key = name.rpartition("/")
    validate_token(key, "object key")
    return _checked_space(space)


def chunk_subject(prefix: str, name: str, index: int) -> str:
    """The subject of chunk ``index`` of object ``name``."""
    space, key = space_of(name), name.rpartition("/")[2]
    return f"$O.{objects_bucket(prefix)}.C.{space}.{key}.{index}"


def chunks_of(prefix: str, space_pattern: str) -> str:
    """The subjects of every chunk kept in the spaces ``space_pattern`` matches (its
    tokens may be ``*``): for a user's rights."""
    return f"$O.{objects_bucket(prefix)}.C.{space_pattern}.>"


def _checked_space(space: str) -> str:
    if not space:
        raise InvalidSubjectToken("an object's space is empty")
    for token in space.split("."):
        validate_token(token, "object space token")
    return space
