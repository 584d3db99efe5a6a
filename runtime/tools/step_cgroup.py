"""A cgroup per ``python`` step: its memory and its processes limited as a whole.

Per-process limits leave a step free to hold its limit once per process, and a limit on
the processes of a user is shared by every step running as that user: one step's fork
bomb makes another step's fork fail. So each step gets a cgroup of its own, made before it
starts and removed after it ends, with ``memory`` (swap included) and ``pids`` limits; the
step's first process enters it before it becomes bubblewrap, so nothing of the step ever
runs outside it.

Where the cgroups are made is found once per process:

1. cgroup v2: ``$PLANCAST_STEP_CGROUP`` if set, else this process's own cgroup, else its
   parent (systemd's ``Delegate=yes`` with ``DelegateSubgroup=``): the first we may write
   whose ``cgroup.subtree_control`` has ``memory`` and ``pids``;
2. cgroup v1: the ``memory`` and ``pids`` hierarchies, under this process's cgroup in each,
   when we may write there (root on a host or container with v1 or hybrid cgroups);
3. none of these: the step keeps per-process limits only (``RLIMIT_AS`` per process,
   ``RLIMIT_NPROC`` for the sandbox's user), and a warning says so once.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import secrets
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.to_thread

from .errors import ToolError

log = logging.getLogger(__name__)

ENV_VAR = "PLANCAST_STEP_CGROUP"
"""A cgroup v2 directory, delegated to this process, under which step cgroups are made."""
CONTROLLERS = ("memory", "pids")
EMPTY_DEADLINE = 10.0
"""Seconds to wait for a step's processes to be gone before its cgroup is left behind."""

# Runs first, outside the sandbox: join the step's cgroups, then become the command.
_ENTER = """\
import os, sys
end = sys.argv.index("--")
try:
    for procs in sys.argv[1:end]:
        with open(procs, "w") as file:
            file.write(str(os.getpid()))
except OSError as exc:
    sys.exit(f"plancast: cannot enter the step's cgroup: {exc}")
os.execv(sys.argv[end + 1], sys.argv[end + 1:])
"""


@dataclass(frozen=True)
class CgroupLayout:
    """Where this machine lets us make step cgroups."""

    version: int
    """1 (one directory per controller) or 2 (one directory for all)."""
    parents: tuple[Path, ...]
    """The directories step cgroups are made in: one for v2; memory's then pids' for v1."""

    def __str__(self) -> str:
        where = " and ".join(map(str, self.parents))
        return f"cgroup v{self.version} (memory and pids) under {where}"


@functools.cache
def step_cgroup_layout() -> CgroupLayout | None:
    """Found once per process, and said once in the log: with which cgroups steps are
    limited as a whole, or that they are not."""
    reasons: list[str] = []
    layout = _find_v2(reasons) or _find_v1(reasons)
    configured = os.environ.get(ENV_VAR)
    if configured and (layout is None or layout.parents != (Path(configured),)):
        log.warning("python tool: %s=%s is not used (%s)", ENV_VAR, configured,
                    "; ".join(reasons))
    if layout is not None:
        log.info("python tool: each step runs in a cgroup of its own: %s", layout)
    else:
        log.warning(
            "python tool: no cgroup to limit a step as a whole (%s); falling back to "
            "per-process limits: each process may use the memory limit and the process "
            "limit counts every step of the sandbox's user together. Delegate a cgroup v2 "
            "with memory and pids to this process (%s) to limit each step",
            "; ".join(reasons), ENV_VAR)
    return layout


class StepCgroup:
    """One step's cgroups: made with the limits, entered by the step's first process,
    emptied and removed when the step ends."""

    def __init__(self, layout: CgroupLayout, memory_bytes: int, max_processes: int) -> None:
        name = f"plancast-step-{os.getpid()}-{secrets.token_hex(4)}"
        self.layout = layout
        self.dirs = [parent / name for parent in layout.parents]
        self.memory_bytes = memory_bytes
        self.max_processes = max_processes

    @property
    def memory_dir(self) -> Path:
        return self.dirs[0]

    @property
    def pids_dir(self) -> Path:
        return self.dirs[-1]

    def entering(self, command: list[str]) -> list[str]:
        """``command`` started inside the step's cgroups (every process it makes too)."""
        procs = [str(d / "cgroup.procs") for d in self.dirs]
        return [sys.executable, "-I", "-S", "-c", _ENTER, *procs, "--", *command]

    def create(self) -> None:
        try:
            for directory in self.dirs:
                directory.mkdir()
            memory = str(self.memory_bytes)
            if self.layout.version == 2:
                _write(self.memory_dir / "memory.max", memory)
                _write_if_there(self.memory_dir / "memory.swap.max", "0")
            else:  # the limit first: memory and swap together may not be below it
                _write(self.memory_dir / "memory.limit_in_bytes", memory)
                _write_if_there(self.memory_dir / "memory.memsw.limit_in_bytes", memory)
            _write(self.pids_dir / "pids.max", str(self.max_processes))
        except OSError as exc:
            self._remove()
            raise ToolError(f"the python tool cannot make the step's cgroup under "
                            f"{self.layout}: {exc}") from None

    def oom_kills(self) -> int:
        """How many of the step's processes the kernel killed for its memory limit."""
        events = "memory.events" if self.layout.version == 2 else "memory.oom_control"
        with contextlib.suppress(OSError, ValueError):
            for line in (self.memory_dir / events).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    async def close(self) -> None:
        """Kill whatever of the step is left, wait until the kernel has let go of it, and
        remove the cgroups (left behind, with a warning, if that takes too long)."""
        with anyio.move_on_after(EMPTY_DEADLINE):
            # The kernel says nothing when a v1 cgroup empties: poll it.
            while await anyio.to_thread.run_sync(self._kill_all):  # noqa: ASYNC110
                await anyio.sleep(0.02)  # dying processes leave on their own
        await anyio.to_thread.run_sync(self._remove)

    def _kill_all(self) -> bool:
        """SIGKILL every process in the step's cgroup; False once it is empty."""
        pids = _pids(self.pids_dir)
        if not pids:
            return False
        kill = self.pids_dir / "cgroup.kill"
        if kill.exists():
            _write(kill, "1")
            return True
        for pid in pids:
            with contextlib.suppress(OSError):
                pidfd = os.pidfd_open(pid)
                try:  # the pid may have been reused by a process outside before it opened
                    if pid in _pids(self.pids_dir):
                        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                finally:
                    os.close(pidfd)
        return True

    def _remove(self) -> None:
        for directory in self.dirs:
            try:
                directory.rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("python tool: step cgroup %s left behind: %s", directory, exc)


@contextlib.asynccontextmanager
async def open_step_cgroup(memory_bytes: int, max_processes: int) -> AsyncIterator[
        StepCgroup | None]:
    """A fresh cgroup for one step with these limits, or None where the machine has none
    for us (see :func:`step_cgroup_layout`); always removed on exit, cancelled or not."""
    layout = await anyio.to_thread.run_sync(step_cgroup_layout)
    if layout is None:
        yield None
        return
    cgroup = StepCgroup(layout, memory_bytes, max_processes)
    await anyio.to_thread.run_sync(cgroup.create)
    try:
        yield cgroup
    finally:
        with anyio.CancelScope(shield=True):
            await cgroup.close()


def _write(path: Path, value: str) -> None:
    with open(path, "w") as file:  # one write(2): the cgroup file system wants it whole
        file.write(value)


def _write_if_there(path: Path, value: str) -> None:
    if path.exists():
        _write(path, value)


def _pids(directory: Path) -> list[int]:
    try:
        return [int(line) for line in (directory / "cgroup.procs").read_text().split()]
    except FileNotFoundError:
        return []


def _mounts() -> list[tuple[str, Path, str, set[str]]]:
    """(root within the file system, mount point, type, super options) per mount."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, kind = left.split(), right.split()
        if len(fields) < 5 or len(kind) < 3:
            continue
        root, point = (_unescape(f) for f in fields[3:5])
        found.append((root, Path(point), kind[0], set(kind[2].split(","))))
    return found


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    for code in ("\\040", "\\011", "\\012", "\\134"):
        field = field.replace(code, chr(int(code[1:], 8)))
    return field


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup path per controller; ``""`` is the v2 (unified) one."""
    own = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            own[controller] = path
    return own


def _under_mount(mount_root: str, point: Path, path: str) -> Path | None:
    """Where the cgroup ``path`` appears under a mount of the subtree ``mount_root``."""
    inside = Path(path).relative_to("/")
    if ".." in inside.parts:  # outside the cgroup namespace this mount shows
        return None
    if mount_root != "/":
        try:
            inside = inside.relative_to(Path(mount_root).relative_to("/"))
        except ValueError:
            return None
    return point / inside


def _can_make_children(directory: Path) -> bool:
    """Whether we may make a cgroup in ``directory``: try it."""
    probe = directory / f"plancast-probe-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        probe.mkdir()
    except OSError:
        return False
    with contextlib.suppress(OSError):
        probe.rmdir()
    return True


def _find_v2(reasons: list[str]) -> CgroupLayout | None:
    try:
        mounts = [(root, point) for root, point, kind, _ in _mounts() if kind == "cgroup2"]
        own = _own_cgroups().get("")
    except OSError as exc:
        reasons.append(f"cannot read this process's cgroups: {exc}")
        return None
    candidates: list[Path] = []
    if configured := os.environ.get(ENV_VAR):
        candidates.append(Path(configured))
    if own is not None:
        for root, point in mounts:
            if (mine := _under_mount(root, point, own)) is not None:
                candidates += [mine, mine.parent] if own != "/" else [mine]
                break
    if not candidates:
        reasons.append("no cgroup v2")
    for directory in candidates:
        try:
            enabled = (directory / "cgroup.subtree_control").read_text().split()
        except OSError as exc:
            reasons.append(f"{directory} is not a cgroup v2 directory we can read ({exc})")
            continue
        missing = [c for c in CONTROLLERS if c not in enabled]
        if configured and directory == Path(configured) and missing:
            with contextlib.suppress(OSError):  # an empty cgroup may enable them itself
                _write(directory / "cgroup.subtree_control",
                       " ".join(f"+{c}" for c in missing))
                missing = []
        if not missing and _can_make_children(directory):
            return CgroupLayout(2, (directory,))
        reasons.append(f"cgroup v2 {directory}: " + (
            f"{' and '.join(missing)} not enabled for its children" if missing
            else "not writable"))
    return None


def _find_v1(reasons: list[str]) -> CgroupLayout | None:
    try:
        mounts, own = _mounts(), _own_cgroups()
    except OSError:
        return None
    parents = []
    for controller in CONTROLLERS:
        found = next((_under_mount(root, point, own[controller])
                      for root, point, kind, options in mounts
                      if kind == "cgroup" and controller in options and controller in own),
                     None)
        if found is None:
            reasons.append(f"no cgroup v1 {controller} hierarchy")
            return None
        if not _can_make_children(found):
            reasons.append(f"cgroup v1 {found} not writable")
            return None
        parents.append(found)
    return CgroupLayout(1, tuple(parents))
