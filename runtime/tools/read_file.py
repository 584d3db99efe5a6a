"""``read_file``: let a model read files under one directory and nowhere else.

The path is walked one component at a time from a descriptor of the root, each opened
relative to the directory before it and never following a link by itself: a symlink is
read and its target walked the same way (an absolute target only if it names a place under
the root), and ``..`` goes back to a directory already walked, never above the root. So
neither ``../../etc/passwd``, an absolute path, a symlink pointing out nor a directory
swapped for a symlink while the walk runs gets through (checking a resolved path and then
opening it would follow a link swapped in between). Kernel file systems (``/proc``,
``/sys``, ``/dev``) are refused even under a root that holds them: a process's environment
and memory are not files to hand a model. Every failure is a ToolError with its reason.
"""

from __future__ import annotations

import os
import stat
from collections import deque
from pathlib import Path, PurePosixPath
from typing import Annotated

import anyio.to_thread
import msgspec

from ._base import StructTool
from .errors import ToolError

KERNEL_FILES = (Path("/proc"), Path("/sys"), Path("/dev"))
MAX_SYMLINKS = 40
"""Links followed in one path, as the kernel allows (ELOOP past it)."""
_NOT_FOLLOWED = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_FOR_READING = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class ReadFileArgs(msgspec.Struct, forbid_unknown_fields=True):
    path: Annotated[
        str, msgspec.Meta(description="Path of the file, relative to the shared directory.")
    ]


class ReadFileTool(StructTool[ReadFileArgs]):
    """Reads text files inside ``root``; larger than ``max_bytes`` is refused, not truncated."""

    name = "read_file"
    args_type = ReadFileArgs

    def __init__(self, root: str | os.PathLike[str], *, max_bytes: int = 1_000_000) -> None:
        self.root = Path(root).resolve(strict=True)
        """The only directory whose files can be read (resolved once, at construction)."""
        if not self.root.is_dir():
            raise NotADirectoryError(self.root)
        self.max_bytes = max_bytes
        """Largest file returned."""
        self.description = (
            "Read a text file from the shared directory and return its contents. "
            f"Paths are relative to that directory; files over {max_bytes} bytes are refused."
        )

    async def call(self, args: ReadFileArgs) -> str:
        return await anyio.to_thread.run_sync(self._read, args.path)

    def _read(self, path: str) -> str:
        if "\x00" in path:
            raise ToolError("path contains a NUL byte")
        try:
            fd = self._open_beneath(path)
        except FileNotFoundError:
            raise ToolError(f"no such file: {path!r}") from None
        except OSError as exc:
            raise ToolError(f"cannot open {path!r}: {exc.strerror or exc}") from None
        try:
            data = _read_up_to(fd, self.max_bytes + 1)
        except OSError as exc:
            raise ToolError(f"cannot read {path!r}: {exc.strerror or exc}") from None
        finally:
            os.close(fd)
        if len(data) > self.max_bytes:  # grew since it was opened
            raise ToolError(f"{path!r} is larger than the limit of {self.max_bytes} bytes")
        return data.decode("utf-8", errors="replace")

    def _open_beneath(self, path: str) -> int:
        """A descriptor open for reading on the regular file ``path`` names under root."""
        walked: list[tuple[int, str]] = []  # (descriptor, name) of each directory, root first
        try:
            walked.append((os.open(self.root, _NOT_FOLLOWED | os.O_DIRECTORY), ""))
            pending = deque(self._parts(path, path))
            links = 0
            while pending:
                name = pending.popleft()
                if name in ("", "."):
                    continue
                if name == "..":
                    if len(walked) == 1:
                        raise _outside(path)
                    os.close(walked.pop()[0])
                    continue
                real = self.root.joinpath(*(n for _, n in walked[1:]), name)
                if any(real.is_relative_to(kernel) for kernel in KERNEL_FILES):
                    raise ToolError(f"{path!r} is in {real.parts[1]!r}, a kernel file system")
                parent = walked[-1][0]
                fd = os.open(name, _NOT_FOLLOWED, dir_fd=parent)
                mode = os.fstat(fd).st_mode
                if stat.S_ISLNK(mode):
                    os.close(fd)
                    links += 1
                    if links > MAX_SYMLINKS:
                        raise ToolError(f"{path!r}: more than {MAX_SYMLINKS} symbolic links")
                    target = os.readlink(name, dir_fd=parent)
                    if target.startswith("/"):  # from the root again
                        while len(walked) > 1:
                            os.close(walked.pop()[0])
                    pending.extendleft(reversed(self._parts(target, path)))
                    continue
                walked.append((fd, name))
                if pending and not stat.S_ISDIR(mode):
                    raise ToolError(f"{path!r}: {name!r} is not a directory")
            return self._open_file(path, walked)
        finally:
            for fd, _ in walked:
                os.close(fd)

    def _open_file(self, path: str, walked: list[tuple[int, str]]) -> int:
        """Open the walk's last entry for reading once it is known to be a small regular
        file (the walk's descriptor has no side effects; opening a device or a FIFO could)."""
        if len(walked) == 1:
            raise ToolError(f"{path!r} is not a regular file")
        (parent, _), (found, name) = walked[-2:]
        info = os.fstat(found)
        if not stat.S_ISREG(info.st_mode):
            raise ToolError(f"{path!r} is not a regular file")
        if info.st_size > self.max_bytes:
            raise ToolError(
                f"{path!r} is {info.st_size} bytes; the limit is {self.max_bytes} bytes")
        fd = os.open(name, _FOR_READING, dir_fd=parent)
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
            os.close(fd)
            raise ToolError(f"{path!r} changed while it was opened; try again")
        return fd

    def _parts(self, text: str, path: str) -> list[str]:
        """The components of ``text`` to walk from where the walk is (relative) or from
        the root (absolute: only a path under the root's own)."""
        if not text.startswith("/"):
            return text.split("/")
        parts = PurePosixPath(text).parts
        if parts[: len(self.root.parts)] != self.root.parts:
            raise _outside(path)
        return list(parts[len(self.root.parts):])


def _outside(path: str) -> ToolError:
    return ToolError(f"{path!r} is outside the readable directory; use a relative path")


def _read_up_to(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size < limit and (chunk := os.read(fd, min(limit - size, 1 << 16))):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
