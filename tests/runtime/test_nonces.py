"""Nonces and message ids stay HMAC-SHA256 digests of what they name: a planner taking a
run over from one of another version must compute the very same ones."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from runtime.nonces import Nonces


def reference(secret: str, *parts: object) -> str:
    key = hashlib.sha256(b"plancast-nonce\0" + secret.encode()).digest()
    mac = hmac.new(key, "\0".join(str(p) for p in parts).encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac[:16]).decode().rstrip("=")


@pytest.mark.parametrize("secret", ["", "s3cret", "x" * 200, "clé"])
def test_every_digest_is_the_keyed_hmac_of_what_it_names(secret: str) -> None:
    nonces = Nonces(secret)
    for _ in range(2):  # the keyed state is copied per digest, never consumed
        assert nonces.task("run-1", 3, 1) == reference(secret, "step", "run-1", 3, 1)
        assert nonces.idempotency("run-1", 3, 2) == \
            f"pc-{reference(secret, 'idempotency', 'run-1', 3, 2)}"
        assert nonces.review("r", 0, 1) == reference(secret, "review", "r", 0, 1)
        assert nonces.synthesis("r", 4) == reference(secret, "synthesis", "r", 4)
        assert nonces.plan("r", 1, "d") == reference(secret, "plan", "r", 1, "d")
        assert nonces.msg_id("r/1/1/f0") == f"r/1/1/f0/{reference(secret, 'id', 'r/1/1/f0')[:16]}"
    assert Nonces("a").task("r", 1, 1) != Nonces("b").task("r", 1, 1)
