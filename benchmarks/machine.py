"""How this machine runs code right after sleeping: reported beside every result.

Measured in the ninth series: here a piece of Python that takes 26 µs when run again and
again takes 91 µs right after a 50 ms sleep, and a pipe round trip to another process 5 µs
against 54 µs. A step of 50 ms leaves every process idle, so each process a run's hop goes
through (executor, nats-server, planner) pays that again at every layer, where the peers,
in one process, pay it once. The same code also measures up to 20 % apart from one hour to
the next; these figures let two results files be compared.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

IDLE = 0.05
"""Seconds slept before each cold sample: the benchmark's step time."""

_ECHO = "import os\nwhile os.read(0, 1) == b'p':\n    os.write(1, b'x')\n"
_DOC = json.dumps({"messages": [{"role": "user", "content": "x" * 3000}],
                   "steps": list(range(200))})


def _work() -> None:
    """A fixed piece of work of the kind a hop does (reading a message)."""
    for _ in range(3):
        json.loads(_DOC)


def _timed(action: Callable[[], object], samples: int, idle: float) -> float:
    """Median µs of ``action()``, each run after sleeping ``idle`` seconds (0: back to back)."""
    times = []
    for _ in range(samples):
        if idle:
            time.sleep(idle)
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def calibrate(samples: int = 40) -> dict[str, float]:
    """The four figures: a piece of Python and a round trip to another process, each run
    back to back (hot) and right after a sleep of ``IDLE`` (after idle)."""
    echo = subprocess.Popen([sys.executable, "-c", _ECHO], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    assert echo.stdin is not None and echo.stdout is not None
    send, receive = echo.stdin.fileno(), echo.stdout.fileno()

    def round_trip() -> None:
        os.write(send, b"p")
        os.read(receive, 1)

    try:
        round_trip()  # the child is up
        return {"work_hot_us": _timed(_work, samples, 0.0),
                "work_after_idle_us": _timed(_work, samples, IDLE),
                "round_trip_hot_us": _timed(round_trip, samples, 0.0),
                "round_trip_after_idle_us": _timed(round_trip, samples, IDLE)}
    finally:
        os.write(send, b"q")
        echo.wait(timeout=10)
        echo.stdin.close()
        echo.stdout.close()
