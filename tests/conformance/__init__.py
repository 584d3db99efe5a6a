"""Clients written in other languages from docs/wire.md alone, with the official NATS
packages (nats.js, installed from ``package-lock.json`` on first use)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from ..needs import missing, require

HERE = Path(__file__).parent


def nats_js() -> str:
    """``node``, with the NATS packages of the lock file installed here (``npm ci``, once);
    skips naming the package to install without Node.js or npm (see ``tests.needs``)."""
    node = require("node", "nodejs npm")
    if not (HERE / "node_modules" / "@nats-io" / "jetstream").exists():
        npm = require("npm", "npm")
        try:
            subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=HERE, check=True,
                           capture_output=True, timeout=300)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            said = (exc.stderr or b"").decode(errors="replace").strip().splitlines()
            missing(f"npm ci could not install the NATS packages here "
                    f"({said[-1] if said else exc}): run it in {HERE} with the registry reachable")
    return node
