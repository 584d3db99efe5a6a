"""Task nonces and message ids that only the deployment's planners can compute.

A task's ``nonce`` is its receiver's proof: every outcome that answers a task (a claim, a
result, a verdict, a decision, a failure report, a dead letter's replan) carries it back,
and the planner counts the outcome only if it is the nonce of that very work. So holding
a role's credentials is not enough to answer for work one never received. Nonces and the
ids of the planner's own messages (tasks, syntheses, plan reviews) are keyed digests of
what they name, so any planner that takes a run over computes the same ones, and nobody
else can compute them to publish first under an id the planner will use.

The key comes from a secret the planners share: ``PLANCAST_SECRET``, else the ``secret``
line ``plancast auth init`` writes into every planner's credentials, else the token of a
local deployment (``plancast up``). On an open bus without any of these the nonces are
predictable — as is everything else there, since any client reads every task.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging

from .bus import read_creds
from .config import Settings

__all__ = ["Nonces", "planners_secret"]

log = logging.getLogger(__name__)


def planners_secret(settings: Settings) -> str:
    """The secret a planner keys its nonces with (see the module's docstring)."""
    if settings.secret:
        return settings.secret
    creds = read_creds(settings.creds) if settings.creds else None
    if creds is not None and creds.secret:
        return creds.secret
    if settings.token:
        return settings.token
    if settings.creds or settings.user:
        log.warning("no planners' secret (PLANCAST_SECRET, or a planner's credentials from "
                    "`plancast auth init`): task nonces and message ids are predictable")
    return ""


class Nonces:
    """The keyed digests of one deployment's planners."""

    __slots__ = ("_keyed",)

    def __init__(self, secret: str) -> None:
        key = hashlib.sha256(b"plancast-nonce\0" + secret.encode()).digest()
        self._keyed = hmac.new(key, digestmod=hashlib.sha256)
        """Keyed once and copied per digest (a planner makes about four per step)."""

    def _digest(self, *parts: object) -> str:
        mac = self._keyed.copy()
        mac.update("\0".join(map(str, parts)).encode())
        return base64.urlsafe_b64encode(mac.digest()[:16]).decode().rstrip("=")

    def task(self, run_id: str, step_id: int, attempt: int) -> str:
        """The nonce of a step's attempt (every delivery of its task carries it)."""
        return self._digest("step", run_id, step_id, attempt)

    def idempotency(self, run_id: str, step_id: int, attempt: int) -> str:
        """A step attempt's idempotency key (``StepTask.idempotency_key``): the same for
        every delivery and any planner, another per attempt, and unlike the nonce safe to
        hand to the outside world (it proves nothing to a planner)."""
        return f"pc-{self._digest('idempotency', run_id, step_id, attempt)}"

    def review(self, run_id: str, step_id: int, attempt: int) -> str:
        """The nonce of the critic's review of a step's attempt."""
        return self._digest("review", run_id, step_id, attempt)

    def synthesis(self, run_id: str, round_: int) -> str:
        """The nonce of a plan round's synthesis."""
        return self._digest("synthesis", run_id, round_)

    def plan(self, run_id: str, round_: int, digest: str) -> str:
        """The nonce of the critic's review of a plan round."""
        return self._digest("plan", run_id, round_, digest)

    def msg_id(self, base: str) -> str:
        """``base`` (what the id names: run, step, attempt, owner) with a keyed tag, so
        no other participant can store a message under it first."""
        return f"{base}/{self._digest('id', base)[:16]}"

    @staticmethod
    def same(given: str, expected: str) -> bool:
        """Compare in constant time."""
        return hmac.compare_digest(given.encode(), expected.encode())
