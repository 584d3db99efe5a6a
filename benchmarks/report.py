"""Results on disk: ``results.json`` (everything, with the machine) and ``results.md`` (tables)."""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from runtime.bus import find_nats_server

from .machine import calibrate
from .tables import markdown


def nats_server_version() -> str:
    """What ``nats-server --version`` prints, or why it could not be run."""
    try:
        done = subprocess.run([find_nats_server(), "--version"], capture_output=True,
                              text=True, timeout=10, check=False)
    except Exception as exc:
        return f"unknown ({exc})"
    return done.stdout.strip() or done.stderr.strip()


def plancast_version() -> str:
    try:
        return version("plancast")
    except PackageNotFoundError:
        return "unknown (not installed)"


def machine(*, quick: bool = False) -> dict[str, Any]:
    return {
        "cores": os.cpu_count(), "python": platform.python_version(),
        "implementation": platform.python_implementation(), "platform": platform.platform(),
        "nats_server": nats_server_version(), "after_idle": calibrate(5 if quick else 40),
    }


def header(seed: int, config: dict[str, Any], command: str) -> dict[str, Any]:
    """The fields every results file starts with."""
    return {"date": datetime.now(UTC).isoformat(timespec="seconds"),
            "plancast_version": plancast_version(),
            "machine": machine(quick=bool(config.get("quick"))), "seed": seed,
            "command": command, "config": config}


def write(results: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    """Write both files; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / "results.json", out_dir / "results.md"
    json_path.write_text(json.dumps(_clean(results), indent=2, allow_nan=False) + "\n")
    md_path.write_text(markdown(results))
    return json_path, md_path


def _clean(value: Any) -> Any:
    """NaN (no data) becomes null: strict JSON has no NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value
