"""Tests that need a system program (bubblewrap, Node.js, Chromium): on a machine without it
they skip, in one line naming the package to install, so the README's two commands pass on
a fresh machine. Where the programs must be there, ``PLANCAST_REQUIRE_TOOLS=1`` (``.ci/run``
sets it, after installing them) makes that skip a failure instead."""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

import pytest

REQUIRE = "PLANCAST_REQUIRE_TOOLS"


def needs(command: str, package: str) -> pytest.MarkDecorator:
    """Mark a test (or a module, through ``pytestmark``) as needing ``command``, which the
    system package ``package`` installs (checked before its fixtures start anything)."""
    return pytest.mark.needs(command, package)


def require(command: str, package: str) -> str:
    """The path of ``command``; without it, skip (or fail: see the module) naming
    ``package``."""
    path = shutil.which(command)
    if path is None:
        missing(f"needs {command}: apt install {package}")
    return path


def missing(reason: str) -> NoReturn:
    """Skip with ``reason``, or fail with it where the tools must be there."""
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{reason} ({REQUIRE}=1: the tests' programs must all be here)",
                    pytrace=False)
    pytest.skip(f"{reason} (.ci/run installs it)")


BWRAP = needs("bwrap", "bubblewrap")
"""The ``python`` tool runs code only inside bubblewrap."""
NODE = needs("node", "nodejs npm")
"""Clients in JavaScript (tests/conformance)."""
CHROMIUM = needs("chromium", "chromium")
"""The dashboard in a real browser."""
