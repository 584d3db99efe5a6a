"""How a plancast process runs its event loop: on uvloop when it is installed (the ``fast``
extra) and not turned off with ``PLANCAST_UVLOOP=0``, else on asyncio's own; and with the
cyclic garbage collector set for a long-lived server rather than a script."""

from __future__ import annotations

import gc
import importlib.util
import os
from typing import Any


def uses_uvloop() -> bool:
    return os.environ.get("PLANCAST_UVLOOP", "1") != "0" \
        and importlib.util.find_spec("uvloop") is not None


def backend_options() -> dict[str, Any]:
    """``anyio.run(..., backend_options=...)`` for this process."""
    return {"use_uvloop": True} if uses_uvloop() else {}


GC_THRESHOLDS = (20_000, 20, 50)
"""Allocations before a young collection, and young (then middle) collections before an
older one. Python's defaults (2,000, 10, 10 since 3.13; 700 before) make a planner holding
a few thousand steps' state walk it again and again: 10-20 % of its CPU per step."""


def tune_gc() -> None:
    """Before the loop starts: what was loaded at start-up (modules, the team, settings) is
    moved out of the collector's sight for good, and collections come less often. Garbage
    in cycles is still collected; it lives a little longer."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
