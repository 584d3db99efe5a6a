"""A second network namespace, so one node and its actors can be cut off from the rest.

The "side" namespace holds node n3 and some actors; the root namespace holds n1, n2, the
other actors and the driver. Two veth pairs join them:

- the NATS link (``10.213.X.1`` root end, ``10.213.X.2`` side end, X a subnet no other
  suite on the machine uses): nodes listen on these addresses, and a partition sets this
  link down, so neither side reaches the other's NATS ports (established connections go
  silent; nothing is reset);
- the model link (``10.214.X.1``/``.2``): the scripted model server listens on the root
  end, so both sides still reach "the model provider" while NATS is partitioned.

Needs root and ``ip``; without them ``open_network`` returns a loopback-only network whose
``unavailable`` says why, and the partition fault is reported as not run.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


class NetworkError(RuntimeError):
    """An ``ip`` command failed."""


@dataclass
class Network:
    root_addr: str
    """Where root-side nodes listen."""
    side_addr: str
    """Where the side's node listens (same as root_addr without a namespace)."""
    model_addr: str
    """Where the scripted model listens; reachable from both sides at all times."""
    namespace: str | None = None
    """The side's namespace, or None when everything shares the root namespace."""
    link: str = ""
    """Root end of the NATS veth: set down to partition."""
    unavailable: str = ""
    """Why partitions cannot be made here (empty when they can)."""
    cut_now: bool = False

    def wrap(self, argv: Sequence[str], *, side: bool) -> list[str]:
        """The command to run ``argv`` on the side (in the namespace) or in the root."""
        if side and self.namespace:
            return ["ip", "netns", "exec", self.namespace, *argv]
        return list(argv)

    def cut(self) -> None:
        """Partition: the side's node and actors lose every NATS path to the others."""
        _ip("link", "set", self.link, "down")
        self.cut_now = True

    def heal(self) -> None:
        _ip("link", "set", self.link, "up")
        self.cut_now = False


def _ip(*args: str, namespace: str | None = None) -> None:
    argv = ["ip", *args] if namespace is None else ["ip", "netns", "exec", namespace, "ip", *args]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NetworkError(f"{' '.join(argv)}: {done.stderr.strip()}")


def why_not() -> str:
    """Why this machine cannot make namespaces, or "" if it can."""
    if os.geteuid() != 0:
        return "partitions need root (network namespaces and veth links)"
    if shutil.which("ip") is None:
        return "partitions need the `ip` command (iproute2)"
    return ""


PREFIX = "plancast-chaos-"
"""Namespaces are ``plancast-chaos-<pid of the suite>``: several suites may run at once."""
LOCK = Path(tempfile.gettempdir()) / "plancast-chaos-netns.lock"


@contextmanager
def open_network(*, wanted: bool = True) -> Iterator[Network]:
    """A side namespace joined to the root by two veth pairs, removed on exit (loopback
    only if not ``wanted``: no partition fault is planned)."""
    reason = why_not() if wanted else "no partition fault was asked for"
    if reason:
        yield Network("127.0.0.1", "127.0.0.1", "127.0.0.1", unavailable=reason)
        return
    pid = os.getpid()
    ns, nats, model = f"{PREFIX}{pid}", f"pcn{pid}", f"pcm{pid}"
    with LOCK.open("w") as lock:  # one suite at a time picks its subnets
        fcntl.flock(lock, fcntl.LOCK_EX)
        _remove_orphans()
        n = _free_subnet()
        try:
            _ip("netns", "add", ns)
            _ip("link", "set", "lo", "up", namespace=ns)
            for link, subnet in ((nats, f"10.213.{n}"), (model, f"10.214.{n}")):
                _ip("link", "add", f"{link}a", "type", "veth", "peer", "name", f"{link}b")
                _ip("link", "set", f"{link}b", "netns", ns)
                _ip("addr", "add", f"{subnet}.1/24", "dev", f"{link}a")
                _ip("addr", "add", f"{subnet}.2/24", "dev", f"{link}b", namespace=ns)
                _ip("link", "set", f"{link}a", "up")
                _ip("link", "set", f"{link}b", "up", namespace=ns)
        except NetworkError as exc:
            _remove(ns, nats, model)
            yield Network("127.0.0.1", "127.0.0.1", "127.0.0.1", unavailable=str(exc))
            return
    try:
        yield Network(f"10.213.{n}.1", f"10.213.{n}.2", f"10.214.{n}.1", namespace=ns,
                      link=f"{nats}a")
    finally:
        _remove(ns, nats, model)


def _free_subnet() -> int:
    """A third octet no link on this machine uses yet."""
    used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True,
                          check=False).stdout
    return next(n for n in range(1, 255) if f"10.213.{n}." not in used)


def _remove_orphans() -> None:
    """Namespaces (and links) of suites that died without cleaning up."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                            check=False).stdout
    for name in (line.split()[0] for line in listed.splitlines() if line.strip()):
        pid = name.removeprefix(PREFIX)
        if name.startswith(PREFIX) and pid.isdigit() and not _alive(int(pid)):
            _remove(name, f"pcn{pid}", f"pcm{pid}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(ns: str, *links: str) -> None:
    for link in links:
        subprocess.run(["ip", "link", "del", f"{link}a"], capture_output=True, check=False)
    subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
