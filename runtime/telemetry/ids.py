"""A run's trace and span ids, derived from its run id so every process agrees on them
without asking (the hooks send them, the SDK pins them)."""

from __future__ import annotations

import hashlib


def run_ids(run_id: str) -> tuple[int, int]:
    """The run's trace id and its ``invoke_workflow`` span's id, derived from the run id:
    the same in every process, never zero (an invalid id)."""
    digest = hashlib.sha256(f"plancast-trace/{run_id}".encode()).digest()
    return int.from_bytes(digest[:16]) or 1, int.from_bytes(digest[16:24]) or 1
