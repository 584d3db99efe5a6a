"""Which event loop a plancast process runs on: uvloop when it is installed (the ``fast``
extra) and not turned off with ``PLANCAST_UVLOOP=0``, else asyncio's own."""

from __future__ import annotations

import importlib.util
import os
from typing import Any


def uses_uvloop() -> bool:
    return os.environ.get("PLANCAST_UVLOOP", "1") != "0" \
        and importlib.util.find_spec("uvloop") is not None


def backend_options() -> dict[str, Any]:
    """``anyio.run(..., backend_options=...)`` for this process."""
    return {"use_uvloop": True} if uses_uvloop() else {}
