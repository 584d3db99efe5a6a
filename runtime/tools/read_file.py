"""``read_file``: let a model read files under one directory and nowhere else.

The path is resolved (``..`` and symlinks followed) before it is checked against the root,
so neither ``../../etc/passwd``, an absolute path nor a symlink pointing out gets through.
Kernel file systems (``/proc``, ``/sys``, ``/dev``) are refused even under a root that
holds them: a process's environment and memory are not files to hand a model.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Annotated

import anyio.to_thread
import msgspec

from runtime.errors import ToolError

from ._base import StructTool

KERNEL_FILES = (Path("/proc"), Path("/sys"), Path("/dev"))


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

    def resolve(self, path: str) -> Path:
        """The real path of ``path`` under root, or ToolError if it points outside."""
        if "\x00" in path:
            raise ToolError("path contains a NUL byte")
        target = (self.root / path).resolve()
        if not target.is_relative_to(self.root):
            raise ToolError(f"{path!r} is outside the readable directory; use a relative path")
        if any(target.is_relative_to(kernel) for kernel in KERNEL_FILES):
            raise ToolError(f"{path!r} is in {target.parts[1]!r}, a kernel file system")
        return target

    def _read(self, path: str) -> str:
        target = self.resolve(path)
        try:
            # O_NOFOLLOW: the resolved path has no symlinks, unless one was swapped in since.
            fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            raise ToolError(f"no such file: {path!r}") from None
        except OSError as exc:
            raise ToolError(f"cannot open {path!r}: {exc.strerror}") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ToolError(f"{path!r} is not a regular file")
            if info.st_size > self.max_bytes:
                raise ToolError(
                    f"{path!r} is {info.st_size} bytes; the limit is {self.max_bytes} bytes"
                )
            data = _read_up_to(fd, self.max_bytes + 1)
        finally:
            os.close(fd)
        if len(data) > self.max_bytes:  # grew since fstat
            raise ToolError(f"{path!r} is larger than the limit of {self.max_bytes} bytes")
        return data.decode("utf-8", errors="replace")


def _read_up_to(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size < limit and (chunk := os.read(fd, min(limit - size, 1 << 16))):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
