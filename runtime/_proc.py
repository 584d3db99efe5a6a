"""The child processes we own (nats-server, the local model server): their plumbing, once.

A child runs in a session of its own (Ctrl-C reaches us only, and we stop it in order),
writes its output to a log file, and dies with us even on SIGKILL (Linux), so a crashed
demo or test run never leaves a server holding ports and store locks. Stopping is SIGTERM,
then SIGKILL past a bound, and the child is always reaped.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio
import anyio.to_thread

__all__ = ("Child", "die_with_parent", "free_port", "free_ports", "wait_ready",
           "wait_ready_off_loop")

ReadyCheck = Callable[[float], bool]
"""One readiness check given the deadline: True once ready, False to ask again; it raises
when the child exited or the deadline passed (with the child's own message)."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is free right now (another process may take it before we bind it).

    Only where a port must be known before the child starts (cluster route ports, which
    every peer must know; the local model server's ``--port``); nats-server's client and
    monitoring ports use ``-1`` and the ports file instead, which has no race. Where the
    kernel says which ports it hands out for ``-1``, one below them: a port picked there
    and released could be handed to a server's own monitor before its routes listen (seen:
    "Error listening on router port ... address already in use").
    """
    low = _ephemeral_low()
    for _ in range(100 if low > 2048 else 0):
        port = random.randrange(max(1024, low // 2), low)
        with socket.socket() as sock, contextlib.suppress(OSError):
            sock.bind((host, port))
            return port
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` different free ports (see ``free_port``), for the nodes of one cluster."""
    ports: list[int] = []
    while len(ports) < count:
        if (port := free_port(host)) not in ports:
            ports.append(port)
    return ports


def _ephemeral_low() -> int:
    """The first port the kernel hands out for a bind to port 0 (0: not known here)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to SIGKILL the child when its parent dies.

    PR_SET_PDEATHSIG fires when the *thread* that forked exits, not the process: spawn
    from a long-lived thread (the main or event-loop thread), never from a worker thread
    such as ``anyio.to_thread``, or the child dies when that worker is retired.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl, parent = ctypes.CDLL(None, use_errno=True).prctl, os.getpid()

    def preexec() -> None:
        if prctl(1, int(signal.SIGKILL), 0, 0, 0) != 0:  # 1 = PR_SET_PDEATHSIG
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


class Child:
    """One child process we own, spawned again in place as often as its server restarts."""

    def __init__(self, what: str) -> None:
        self.what = what
        """What it is, for messages: "nats-server", "the local model server"."""
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        """The process id of the current (or last) process."""
        if self._popen is None:
            raise RuntimeError(f"{self.what} has not been started")
        return self._popen.pid

    def spawn(self, command: Sequence[str], log_path: Path, *, append: bool = False,
              mode: int = 0o666) -> None:
        """Start ``command`` with its stdout and stderr in ``log_path``, which ``append``
        keeps (else each start overwrites it); a new file gets ``mode``.

        Call from a long-lived thread: see ``die_with_parent``.
        """
        flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_APPEND if append else os.O_TRUNC)
        # stderr too: a child's early errors are printed before its logger exists.
        with open(os.open(log_path, flags, mode), "wb") as log:
            self._popen = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches us only; we stop the child in order
                preexec_fn=die_with_parent(),
            )

    def is_running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def exit_status(self) -> int | None:
        """The status it exited with; None while it runs (or before it was started)."""
        return None if self._popen is None else self._popen.poll()

    def wait(self, timeout: float | None = None) -> int | None:
        """Its exit status once it exits within ``timeout``; None while it runs."""
        assert self._popen is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self._popen.wait(timeout)
        return None

    def stop(self, timeout: float) -> None:
        """SIGTERM so it shuts down cleanly; SIGKILL if it lingers past ``timeout``."""
        if self.is_running():
            assert self._popen is not None
            self._popen.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._popen.wait(timeout)
        self.kill()

    def kill(self) -> None:
        """SIGKILL now, as a crash would, and reap it."""
        if self.is_running():
            assert self._popen is not None
            self._popen.kill()
        if self._popen is not None:
            self._popen.wait()


def wait_ready(check: ReadyCheck, deadline: float, poll: float) -> None:
    """Ask ``check`` every ``poll`` seconds until the child is ready (it raises if never)."""
    while not check(deadline):
        time.sleep(poll)


async def wait_ready_off_loop(check: ReadyCheck, deadline: float, poll: float) -> None:
    """``wait_ready`` for async code: each check in a worker thread, off the event loop."""
    # A child process has no event to wait on: poll.
    while not await anyio.to_thread.run_sync(check, deadline):  # noqa: ASYNC110
        await anyio.sleep(poll)
