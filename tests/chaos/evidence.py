"""The actors' log lines about one run, from every member's log, in time order.

Runner processes log ``HH:MM:SS.mmm <pid> <logger> <LEVEL> <message>`` (see
``tests.durability.runner``); each line naming the run is kept, with the pid replaced by
the member it belonged to (``planner-2#3``: the third process of planner-2).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

_LINE = re.compile(r"^(\d\d:\d\d:\d\d\.\d{3}) (\d+) (.*)$")


def run_lines(log_dir: Path, run_id: str, owner_of: Callable[[int], str],
              limit: int = 200) -> list[str]:
    """The last ``limit`` log lines that mention ``run_id``, oldest first."""
    found: list[tuple[str, str]] = []
    for path in sorted(log_dir.glob("*.log")):
        with path.open(errors="replace") as log:
            for line in log:
                if run_id not in line:
                    continue
                match = _LINE.match(line.rstrip("\n"))
                if match is None:
                    found.append(("", f"{path.stem}: {line.strip()[:300]}"))
                    continue
                when, pid, rest = match.groups()
                found.append((when, f"{when} {owner_of(int(pid))} {rest[:300]}"))
    found.sort(key=lambda item: item[0])
    return [text for _, text in found[-limit:]]


def last_line(path: Path) -> str:
    """The last non-empty line of a log (a runner's fatal exception, usually)."""
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""
