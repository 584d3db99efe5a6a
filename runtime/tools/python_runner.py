"""``python``: run model-written code in a throwaway, resource-limited sandbox.

Each run gets its own temporary working directory (removed afterwards), a minimal
environment, no stdin, limits on address space, CPU time, file size and processes, a
wall-clock timeout that kills the whole process group, and bounded output; by default
inside bubblewrap (``sandbox.py``: no network, nothing of the worker's files; a seccomp
filter, ``seccomp.py``: no keyrings, namespaces or mounts), and it refuses to run without
it unless the team file says ``sandbox = "none"``. Memory and processes are limited for
the step as a whole by a cgroup of its own where the machine has one for us
(``step_cgroup.py``), else per process. A non-zero exit is a ToolError carrying the stderr
tail, which is how the critic sees that code does not run.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import anyio
import anyio.to_thread
import msgspec
from anyio.abc import ByteReceiveStream

from ._base import StructTool
from .code_inputs import INPUTS_FILE, bind_inputs
from .context import current_step
from .errors import ToolError, UnsupportedArchitecture
from .sandbox import NOBODY, SANDBOXES, WORKDIR, find_bwrap, sandboxed
from .seccomp import filter_fd
from .step_cgroup import StepCgroup, open_step_cgroup

# Runs first in the child: set the limits, then replace itself with a clean interpreter.
# A process limit of -1: none per user (the step's cgroup limits its processes instead).
_PRELUDE = """\
import os, resource, sys
address_space, cpu_seconds, file_bytes, processes = map(int, sys.argv[1:])
resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
if processes >= 0:
    resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
os.execv(sys.executable, [sys.executable, "-I", "-X", "utf8", "main.py"])
"""
MB = 1024 * 1024
SANDBOX_PROCESSES = 2
"""bubblewrap's own processes in a step's cgroup (its monitor and the namespace's init)."""
_MAIN_LINE = re.compile(r'File "main\.py", line (\d+)')


class PythonArgs(msgspec.Struct, forbid_unknown_fields=True):
    code: Annotated[str, msgspec.Meta(description="A complete Python 3 program; print results.")]
    timeout: Annotated[
        Annotated[float, msgspec.Meta(gt=0)] | None,
        msgspec.Meta(description="Seconds before it is killed (default and maximum are set)."),
    ] = None


class _Capture:
    """Collects one output stream up to ``limit`` bytes, keeping the head or the tail."""

    def __init__(self, limit: int, *, keep_tail: bool = False) -> None:
        self.limit = limit
        self.keep_tail = keep_tail
        self.data = bytearray()
        self.dropped = 0

    async def drain(self, stream: ByteReceiveStream) -> None:
        # Keep reading past the limit so the child never blocks on a full pipe.
        async for chunk in stream:
            self.data += chunk
            excess = len(self.data) - self.limit
            if excess > 0:
                self.dropped += excess
                if self.keep_tail:
                    del self.data[:excess]
                else:
                    del self.data[self.limit :]

    def text(self, name: str) -> str:
        text = self.data.decode("utf-8", errors="replace")
        if not self.dropped:
            return text
        where = "first" if self.keep_tail else "last"
        note = f"[{name} truncated: {self.dropped} {where} bytes dropped, limit {self.limit}]"
        return f"{note}\n{text}" if self.keep_tail else f"{text}\n{note}"


class PythonRunner(StructTool[PythonArgs]):
    """Runs a program with ``sys.executable`` and returns its stdout (plus stderr, if any)."""

    name = "python"
    args_type = PythonArgs

    def __init__(
        self,
        *,
        timeout: float = 10.0,
        max_timeout: float = 60.0,
        memory_mb: int = 1024,
        max_output_bytes: int = 64 * 1024,
        max_file_mb: int = 64,
        max_processes: int = 64,
        sandbox: str = "bwrap",
    ) -> None:
        self.timeout = timeout
        """Wall-clock seconds when the call does not ask for a timeout."""
        self.max_timeout = max_timeout
        """Upper bound on a timeout the call asks for."""
        self.memory_mb = memory_mb
        """Memory of the step as a whole (its cgroup), and address space (RLIMIT_AS) of
        each of its processes."""
        self.max_output_bytes = max_output_bytes
        """Bytes kept of stdout (the head) and of stderr (the tail)."""
        self.max_file_mb = max_file_mb
        """Largest file the program may write (RLIMIT_FSIZE)."""
        self.max_processes = max_processes
        """Processes (and threads) the step may have at once: a fork bomb stops there. Its
        cgroup's limit; without one, RLIMIT_NPROC, shared by all steps of the user."""
        if sandbox not in SANDBOXES:
            raise ValueError(f"sandbox must be one of {SANDBOXES}, not {sandbox!r}")
        self.sandbox = sandbox
        self.description = (
            "Run a Python 3 program in a fresh temporary directory and return what it prints. "
            f"No stdin; limits of {timeout:g} s and {memory_mb} MB by default. "
            "A program that fails returns an error with its exit code and traceback."
        )

    async def call(self, args: PythonArgs) -> str:
        timeout = min(args.timeout or self.timeout, self.max_timeout)
        bwrap = find_bwrap() if self.sandbox == "bwrap" else None
        if self.sandbox == "bwrap" and bwrap is None:
            raise ToolError("the python tool runs code only inside bubblewrap, which is not "
                            "installed here: install it (apt install bubblewrap), or set "
                            'sandbox = "none" in the team file to run code unsandboxed')
        step = current_step.get()  # a step's program: its $N are that step's inputs
        code, inputs = bind_inputs(args.code, step.inputs) if step else (args.code, {})
        workdir = Path(await anyio.to_thread.run_sync(_make_workdir))
        try:
            await anyio.Path(workdir / "main.py").write_text(code, encoding="utf-8")
            if inputs:
                await anyio.Path(workdir / INPUTS_FILE).write_text(
                    json.dumps({str(n): text for n, text in inputs.items()}), encoding="utf-8")
            if bwrap is not None and os.geteuid() == 0:  # the program runs as nobody
                await anyio.to_thread.run_sync(_give_to_nobody, workdir)
            returncode, stdout, stderr, oom_kills = await self._run(workdir, timeout, bwrap)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(_remove_workdir, workdir)
        # Tracebacks name "main.py", not a temporary directory that no longer exists.
        errors = stderr.text("stderr").replace(f"{workdir}{os.sep}", "") \
            .replace(f"{WORKDIR}/", "")
        if inputs:  # line numbers as the program was written, before its INPUTS line
            errors = _MAIN_LINE.sub(lambda m: f'File "main.py", line {int(m[1]) - 1}', errors)
        if returncode is None:
            raise ToolError(_failure(f"timed out after {timeout:g} s and was killed", errors))
        if returncode != 0:
            reason = _exit_reason(returncode)
            if oom_kills:
                reason += (f" ({oom_kills} of its processes killed for going over the step's "
                           f"memory limit of {self.memory_mb} MB)")
            raise ToolError(_failure(reason, errors))
        out = stdout.text("stdout")
        return f"{out}\n[stderr]\n{errors}" if errors else out

    async def _run(self, workdir: Path, seconds: float,
                   bwrap: str | None) -> tuple[int | None, _Capture, _Capture, int]:
        """Run main.py in ``workdir`` in a cgroup of its own where there is one; the return
        code is None when ``seconds`` ran out; last, how many processes the kernel killed
        for the step's memory limit."""
        async with open_step_cgroup(self.memory_mb * MB,
                                    self.max_processes + SANDBOX_PROCESSES) as cgroup:
            returncode, stdout, stderr = await self._run_in(workdir, seconds, bwrap, cgroup)
            oom_kills = cgroup.oom_kills() if cgroup is not None else 0
        return returncode, stdout, stderr, oom_kills

    async def _run_in(self, workdir: Path, seconds: float, bwrap: str | None,
                      cgroup: StepCgroup | None) -> tuple[int | None, _Capture, _Capture]:
        processes = -1 if cgroup is not None else self.max_processes
        limits = [self.memory_mb * MB, math.ceil(seconds) + 1, self.max_file_mb * MB, processes]
        command = [sys.executable, "-I", "-c", _PRELUDE, *map(str, limits)]
        seccomp: int | None = None
        if bwrap is not None:
            try:
                seccomp = filter_fd()
            except UnsupportedArchitecture as exc:
                raise ToolError(f"the python tool cannot sandbox code here: {exc}") from None
            command = sandboxed(bwrap, workdir, command, seccomp_fd=seccomp)
        if cgroup is not None:
            command = cgroup.entering(command)
        env = {"PATH": os.defpath, "LANG": "C.UTF-8", "HOME": str(workdir), "TMPDIR": str(workdir)}
        stdout = _Capture(self.max_output_bytes)
        stderr = _Capture(self.max_output_bytes, keep_tail=True)
        try:
            process = await anyio.open_process(
                command, stdin=subprocess.DEVNULL, cwd=workdir, env=env, start_new_session=True,
                pass_fds=() if seccomp is None else (seccomp,),
            )
        finally:
            if seccomp is not None:
                os.close(seccomp)
        returncode: int | None = None
        async with process:
            assert process.stdout is not None and process.stderr is not None
            try:
                with anyio.move_on_after(seconds):
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(stdout.drain, process.stdout)
                        tg.start_soon(stderr.drain, process.stderr)
                        returncode = await process.wait()
                        # Leftover children would hold the pipes open: the program is done.
                        _kill_group(process.pid)
            finally:
                _kill_group(process.pid)
                with anyio.CancelScope(shield=True):
                    await process.wait()
        return returncode, stdout, stderr


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _make_workdir() -> str:
    return tempfile.mkdtemp(prefix="plancast-python-")


def _give_to_nobody(workdir: Path) -> None:
    for path in (workdir, *workdir.iterdir()):
        os.chown(path, NOBODY, NOBODY)


def _remove_workdir(workdir: Path) -> None:
    shutil.rmtree(workdir, ignore_errors=True)


def _exit_reason(returncode: int) -> str:
    if returncode > 0:
        return f"exited with code {returncode}"
    signum = -returncode
    name = signal.Signals(signum).name if signum in signal.valid_signals() else str(signum)
    hint = " (CPU time limit)" if signum == signal.SIGXCPU else ""
    return f"was killed by signal {name}{hint}"


def _failure(reason: str, stderr: str) -> str:
    tail = stderr.rstrip()
    return f"the program {reason}" + (f"\n--- stderr (tail) ---\n{tail}" if tail else "")
