"""Where model-written code runs: a bubblewrap sandbox.

The program sees a read-only ``/usr`` and Python's own installation, an empty private
``/tmp``, and its working directory (``/work``, the only writable place); nothing of the
worker's home, files, credentials or environment. It has no network (its own empty
network namespace), its own process, IPC and host-name namespaces, and a new session.
Killing bubblewrap kills the namespace's first process, and with it every process inside.
A seccomp filter denies it the kernel's keyrings, new namespaces and mounts
(``seccomp.py``); its memory and processes are limited per step (``step_cgroup.py``).

Run as root, bubblewrap sets the namespaces up with root's rights and the program is
switched to the ``nobody`` user (``setpriv``) before it starts: limits on the number of
processes do not bind root. Run as another user, the program keeps that user in a user
namespace of its own.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

SANDBOXES = ("bwrap", "none")
"""``bwrap``: bubblewrap, required by default; ``none``: the team file's explicit opt-out."""
NOBODY = 65534
WORKDIR = "/work"
"""The program's working directory inside the sandbox."""


def find_bwrap() -> str | None:
    """The bubblewrap executable, if installed."""
    return shutil.which("bwrap")


def _system_binds() -> list[str]:
    """``/usr`` read-only, with the top-level links a merged-/usr system has."""
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("bin", "sbin", "lib", "lib32", "lib64"):
        path = Path("/") / top
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), f"/{top}"]
        elif path.is_dir():
            args += ["--ro-bind", str(path), f"/{top}"]
    return [*args, "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]


def sandboxed(bwrap: str, workdir: Path, command: list[str], *,
              seccomp_fd: int | None = None) -> list[str]:
    """``command`` (whose first item is this Python) wrapped to run inside the sandbox,
    in ``workdir`` (seen as ``/work``), under the seccomp filter read from ``seccomp_fd``
    (``seccomp.py``; the descriptor must be passed to bubblewrap)."""
    python = os.path.realpath(sys.executable)
    base = os.path.realpath(sys.base_prefix)
    args = [bwrap, *_system_binds()]
    if not base.startswith("/usr/"):  # e.g. under /root: its parents must be passable
        for parent in reversed(Path(base).parents[:-1]):
            args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", base, base]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
             "--bind", str(workdir), WORKDIR, "--chdir", WORKDIR,
             "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
             "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--clearenv",
             "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", WORKDIR,
             "--setenv", "TMPDIR", WORKDIR, "--setenv", "LANG", "C.UTF-8"]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    inner = [python, *command[1:]]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
        inner = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                 "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", *inner]
    else:
        args += ["--unshare-user", "--cap-drop", "ALL"]
    return [*args, "--", *inner]
