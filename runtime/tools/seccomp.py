"""The seccomp filter the ``python`` tool's sandbox runs under, as a classic BPF program.

bubblewrap loads it (``--seccomp FD``) just before it starts the program. It refuses, with
EPERM, what would let one step reach another or grow a sandbox of its own:

- the kernel's keyrings (``add_key``, ``request_key``, ``keyctl``): a user's keyring
  outlives the step, so a key one step stores is there for the next step of that user;
- new namespaces (``unshare`` and ``clone`` with a ``CLONE_NEW*`` flag, ``setns``): a
  user namespace gives a program capabilities over what it then creates, mount
  namespaces included; ``clone3``, whose flags a filter cannot read, answers ENOSYS so
  the C library falls back to ``clone``;
- mounting (``mount``, ``umount2``, ``pivot_root`` and the new mount API).

Any other architecture than the one the filter was built for (the 32-bit or x32 system
calls of an x86-64 kernel) kills the process. Built with ``struct``: a few dozen
instructions do not need libseccomp.
"""

from __future__ import annotations

import errno
import os
import platform
import struct
from dataclasses import dataclass

from .errors import UnsupportedArchitecture

# Classic BPF opcodes (linux/bpf_common.h) and seccomp return values (linux/seccomp.h).
_LD_W_ABS = 0x00 | 0x00 | 0x20
_JEQ_K = 0x05 | 0x10 | 0x00
_JGE_K = 0x05 | 0x30 | 0x00
_JSET_K = 0x05 | 0x40 | 0x00
_RET_K = 0x06 | 0x00
_RET_KILL_PROCESS = 0x8000_0000
_RET_ERRNO = 0x0005_0000
_RET_ALLOW = 0x7FFF_0000
# Offsets in struct seccomp_data: nr, arch, instruction pointer, then six 64-bit arguments.
_NR, _ARCH, _ARG0_LOW = 0, 4, 16  # the low half of argument 0 on a little-endian machine

NAMESPACE_FLAGS = 0x7E02_0000
"""CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET (in clone's low word)."""
CLONE_NEWTIME = 0x80
"""For ``unshare`` only: in ``clone``'s flags these bits are the exit signal."""


@dataclass(frozen=True)
class _Arch:
    audit: int
    """AUDIT_ARCH_* value in seccomp_data.arch."""
    syscalls: dict[str, int]
    x32_bit: int | None = None
    """Numbers at or above it are another ABI on the same architecture value."""


_NEW_MOUNT_API = {"open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
                  "fsmount": 432, "fspick": 433, "clone3": 435, "mount_setattr": 442}
"""One number on every architecture (added after the tables were unified)."""
_ARCHES = {
    "x86_64": _Arch(0xC000_003E, {
        "clone": 56, "unshare": 272, "setns": 308, "mount": 165, "umount2": 166,
        "pivot_root": 155, "add_key": 248, "request_key": 249, "keyctl": 250,
        **_NEW_MOUNT_API}, x32_bit=0x4000_0000),
    "aarch64": _Arch(0xC000_00B7, {
        "clone": 220, "unshare": 97, "setns": 268, "mount": 40, "umount2": 39,
        "pivot_root": 41, "add_key": 217, "request_key": 218, "keyctl": 219,
        **_NEW_MOUNT_API}),
}
DENIED = ("add_key", "request_key", "keyctl", "setns", "mount", "umount2", "pivot_root",
          "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick",
          "mount_setattr")
"""Refused whatever their arguments."""


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def sandbox_filter(machine: str | None = None) -> bytes:
    """The compiled filter for ``machine`` (this one by default), as bubblewrap reads it."""
    machine = machine or platform.machine()
    arch = _ARCHES.get(machine)
    if arch is None:
        raise UnsupportedArchitecture(
            f"the python tool's seccomp filter knows x86_64 and aarch64, not {machine}")
    if struct.pack("=H", 1) != struct.pack("<H", 1):
        raise UnsupportedArchitecture("the seccomp filter is written for little-endian machines")
    numbers = arch.syscalls
    eperm = _RET_ERRNO | errno.EPERM
    program = [_insn(_LD_W_ABS, _ARCH), _insn(_JEQ_K, arch.audit, jt=1),
               _insn(_RET_K, _RET_KILL_PROCESS), _insn(_LD_W_ABS, _NR)]
    if arch.x32_bit is not None:
        program += [_insn(_JGE_K, arch.x32_bit, jf=1), _insn(_RET_K, _RET_KILL_PROCESS)]
    for name in DENIED:
        program += [_insn(_JEQ_K, numbers[name], jf=1), _insn(_RET_K, eperm)]
    program += [_insn(_JEQ_K, numbers["clone3"], jf=1),
                _insn(_RET_K, _RET_ERRNO | errno.ENOSYS)]
    for name, flags in (("clone", NAMESPACE_FLAGS), ("unshare", NAMESPACE_FLAGS | CLONE_NEWTIME)):
        # The number matches: decide on the flags and return (A now holds them, not nr).
        program += [_insn(_JEQ_K, numbers[name], jf=4), _insn(_LD_W_ABS, _ARG0_LOW),
                    _insn(_JSET_K, flags, jf=1), _insn(_RET_K, eperm),
                    _insn(_RET_K, _RET_ALLOW)]
    program.append(_insn(_RET_K, _RET_ALLOW))
    return b"".join(program)


def filter_fd() -> int:
    """A descriptor to read the filter from, positioned at its start (the caller closes it);
    an in-memory file, so nothing is left on disk."""
    fd = os.memfd_create("plancast-seccomp", os.MFD_CLOEXEC)
    try:
        os.write(fd, sandbox_filter())
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd
