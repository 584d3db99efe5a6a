"""The actors' log lines about one run, from every member's log, in time order; and
what the servers refused.

Runner processes log ``HH:MM:SS.mmm <pid> <logger> <LEVEL> <message>`` (see
``tests.durability.runner``); each line naming the run is kept, with the pid replaced by
the member it belonged to (``planner-2#3``: the third process of planner-2), and a line a
member keeps repeating is shown once with its count. A node logs each message it refused
a user (``Publish Violation``, ``Subscription Violation``: the client is told
"Permissions Violation") and each login it refused (``authentication error``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path

_LINE = re.compile(r"^(\d\d:\d\d:\d\d\.\d{3}) (\d+) (.*)$")
_REFUSED = re.compile(r"(Publish|Subscription|Permissions|Authorization) Violation"
                      r"|authentication error")
_ROUTE = re.compile(r" - rid:\d+ - ")
"""A line about a route between two nodes (``rid``), not a user's connection (``cid``)."""


def run_lines(log_dir: Path, run_id: str, owner_of: Callable[[int], str],
              limit: int = 200) -> list[str]:
    """The last ``limit`` log lines that mention ``run_id``, oldest first; a line one
    member repeats is kept once, with how often and until when."""
    first: dict[tuple[str, str], str] = {}
    """(member, message) → the time it was first said."""
    repeats: dict[tuple[str, str], list[str]] = {}
    for path in sorted(log_dir.glob("*.log")):
        with path.open(errors="replace") as log:
            for line in log:
                if run_id not in line:
                    continue
                match = _LINE.match(line.rstrip("\n"))
                if match is None:
                    when, who, what = "", path.stem, line.strip()
                else:
                    when, pid, what = match.groups()
                    who = owner_of(int(pid))
                key = (who, what[:300])
                first.setdefault(key, when)
                repeats.setdefault(key, []).append(when)
    found = []
    for key, when in sorted(first.items(), key=lambda item: item[1]):
        times = repeats[key]
        more = f" [x{len(times)} until {max(times)}]" if len(times) > 1 else ""
        found.append(f"{when} {key[0]} {key[1]}{more}")
    return found[-limit:]


def last_line(path: Path) -> str:
    """The last non-empty line of a log (a runner's fatal exception, usually)."""
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def permission_violations(server_logs: Iterable[Path], *, routes: bool = False) -> list[str]:
    """Every line of the servers' logs where a user was refused a publish, a subscription
    or a login, prefixed with the node (its log's folder). ``routes``: instead, the route
    connections between nodes refused their login (seed 48: two, as a killed node came
    back; cluster-internal, not a user's rights)."""
    found = []
    for path in server_logs:
        try:
            with path.open(errors="replace") as log:
                found += [f"{path.parent.name}: {line.strip()[:400]}" for line in log
                          if _REFUSED.search(line) and bool(_ROUTE.search(line)) == routes]
        except FileNotFoundError:
            continue
    return found
