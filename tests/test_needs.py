"""The README's ``pytest`` on a machine without bubblewrap or Node.js: the tests that need
them skip, each in one line naming the package to install, and the run goes on (also
under ``-x``); with ``PLANCAST_REQUIRE_TOOLS=1`` (``.ci/run``, which installs them) the same
tests fail. A child pytest, on a PATH without those programs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .needs import REQUIRE
from .subprocesses import ROOT

GONE = frozenset({"bwrap", "node", "nodejs", "npm", "npx"})
TESTS = ("tests/runtime/test_python_sandbox.py::test_it_sees_none_of_the_workers_files",
         "tests/conformance/test_node_worker.py"
         "::test_a_javascript_worker_serves_a_role_from_the_spec_alone")
REASONS = ("needs bwrap: apt install bubblewrap", "needs node: apt install nodejs npm")


def path_without(programs: frozenset[str], shadow: Path) -> str:
    """A PATH with every program of this one but ``programs`` (links in ``shadow``)."""
    shadow.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        if not Path(directory).is_dir():
            continue
        for program in Path(directory).iterdir():
            link = shadow / program.name
            if program.name not in programs and not link.exists() and not link.is_symlink():
                link.symlink_to(program.absolute())
    return str(shadow)


def child_pytest(path: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    given = {k: v for k, v in os.environ.items() if k != REQUIRE and not k.startswith("PYTEST")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", *TESTS, "-q", "-rs", "-p", "no:cacheprovider", *args],
        cwd=ROOT, env={**given, "PATH": path, **env}, capture_output=True, text=True,
        timeout=100, check=False)


def test_without_bubblewrap_or_node_those_tests_skip_naming_the_package(
    tmp_path: Path
) -> None:
    path = path_without(GONE, tmp_path / "bin")
    skipped = child_pytest(path, "-x")
    said = skipped.stdout + skipped.stderr
    assert skipped.returncode == 0, said
    assert "2 skipped" in said, said
    for reason in REASONS:
        [line] = [line for line in said.splitlines() if reason in line]
        assert line.startswith("SKIPPED") and "(.ci/run installs it)" in line, said


def test_where_they_must_be_there_the_skip_is_a_failure(tmp_path: Path) -> None:
    path = path_without(GONE, tmp_path / "bin")
    failed = child_pytest(path, **{REQUIRE: "1"})
    said = failed.stdout + failed.stderr
    assert failed.returncode == 1, said
    assert "2 errors" in said, said
    for reason in REASONS:
        assert f"{reason} ({REQUIRE}=1" in said, said
