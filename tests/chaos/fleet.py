"""The actor processes of a chaos deployment: started, signalled, restarted, stopped.

Each member is one ``python -m tests.durability.runner TEAM ROLE`` process, in the root
namespace or on the side; its stderr (the actors' log) goes to ``<name>.log``. Members die
with the driver (PR_SET_PDEATHSIG), so a crashed suite leaves nothing running. With
per-role users, each member connects as its role's user (``NATS_CREDS``).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from runtime._proc import die_with_parent

from .evidence import last_line
from .netns import Network
from .users import Users

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 60.0


class StartFailed(RuntimeError):
    """A runner did not print READY in time."""


@dataclass
class Member:
    """One actor process (and its successors after restarts)."""

    name: str
    """``planner-1``, ``worker-3`` ..."""
    roles: str
    """The runner's roles, comma-separated."""
    side: bool
    """Lives in the side namespace, with node n3."""
    proc: subprocess.Popen[str] | None = None
    pids: list[int] = field(default_factory=list)
    """Every process id it had, in order."""
    stopped: bool = False
    faulted: bool = False
    """A fault holds it (the fault loop picks another target)."""

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Fleet:
    def __init__(self, team_file: Path, env: dict[str, str], network: Network,
                 log_dir: Path, members: Sequence[Member], users: Users | None = None) -> None:
        self.team_file = team_file
        self.env = env
        self.network = network
        self.log_dir = log_dir
        self.members = list(members)
        self.users = users
        if users and (shared := [m.name for m in self.members if "," in m.roles]):
            raise ValueError(f"{shared} serve several roles: one NATS user cannot")

    def env_of(self, member: Member) -> dict[str, str]:
        """The runner's environment: the deployment's, and its role's credentials."""
        if self.users is None:
            return self.env
        return {**self.env, "NATS_CREDS": str(self.users.creds(member.roles))}

    def log_path(self, member: Member) -> Path:
        return self.log_dir / f"{member.name}.log"

    async def start(self, member: Member) -> None:
        """Start the member's process; returns once its actors serve."""
        argv = [sys.executable, "-m", "tests.durability.runner", str(self.team_file),
                member.roles]
        with self.log_path(member).open("a") as log:
            log.write(f"=== {time.strftime('%H:%M:%S')} start {len(member.pids) + 1}\n")
            log.flush()
            # On the loop's thread, not a worker's: PDEATHSIG follows the forking thread.
            proc = subprocess.Popen(  # noqa: ASYNC220
                self.network.wrap(argv, side=member.side), env=self.env_of(member), cwd=ROOT,
                stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True,
                start_new_session=True, preexec_fn=die_with_parent())
        member.proc, member.stopped = proc, False
        member.pids.append(proc.pid)
        assert proc.stdout is not None
        line = ""
        with anyio.move_on_after(READY_TIMEOUT):
            line = await anyio.to_thread.run_sync(proc.stdout.readline, abandon_on_cancel=True)
        if not line.startswith("READY"):
            self.kill(member)
            raise StartFailed(f"{member.name} did not start (pid {proc.pid}): "
                              f"{last_line(self.log_path(member))}")

    async def start_all(self) -> None:
        async with anyio.create_task_group() as tg:
            for member in self.members:
                tg.start_soon(self.start, member)

    def kill(self, member: Member) -> None:
        """SIGKILL, as a crash would, and reap it."""
        proc = member.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        member.stopped = False

    def stop(self, member: Member) -> None:
        if member.alive:
            assert member.proc is not None
            member.proc.send_signal(signal.SIGSTOP)
            member.stopped = True

    def cont(self, member: Member) -> None:
        if member.alive:
            assert member.proc is not None
            member.proc.send_signal(signal.SIGCONT)
        member.stopped = False

    def close(self) -> None:
        """SIGTERM (the runners drain), then SIGKILL whatever lingers."""
        for member in self.members:
            if member.stopped:
                self.cont(member)
            if member.alive:
                assert member.proc is not None
                member.proc.terminate()
        deadline = time.monotonic() + 10
        for member in self.members:
            proc = member.proc
            if proc is not None and proc.poll() is None:
                try:
                    proc.wait(max(deadline - time.monotonic(), 0.1))
                except subprocess.TimeoutExpired:
                    pass
            self.kill(member)

    def owner_of(self, pid: int) -> str:
        """The member a process id belonged to (for evidence in the report)."""
        for member in self.members:
            if pid in member.pids:
                return f"{member.name}#{member.pids.index(pid) + 1}"
        return f"pid {pid}"
