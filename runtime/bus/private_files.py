"""Files and directories only this user may read: the local deployment's secret, its URL
and its server's config, in a data directory other local users cannot enter.

A file another user could have read (or planted) is refused rather than used: a secret
that leaked opens the deployment to whoever read it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import stat
from pathlib import Path

from .errors import InsecureFile

log = logging.getLogger(__name__)

_OTHERS = stat.S_IRWXG | stat.S_IRWXO
"""Mode bits that let the group or anyone else in."""


def private_dir(path: Path) -> Path:
    """``path`` as a directory only we can enter (0700), made if missing (its missing
    parents too, with the usual mode). One of ours that others may enter is closed (with
    a warning); one owned by another user is refused."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.stat()
    if not stat.S_ISDIR(info.st_mode):
        raise InsecureFile(f"{path} is not a directory")
    if info.st_uid != os.geteuid():
        raise InsecureFile(
            f"{path} belongs to user id {info.st_uid}, not to us: another user could read or "
            "replace plancast's secret there; set PLANCAST_DATA_DIR to a directory of ours")
    if info.st_mode & _OTHERS:
        log.warning("%s was open to other users (mode %04o); it is now 0700", path,
                    stat.S_IMODE(info.st_mode))
        path.chmod(0o700)
    return path


def write_private(path: Path, text: str) -> None:
    """Write ``path`` (mode 0600) so that a reader sees the old file or the whole new one,
    never a part, and never a file someone else made or linked there."""
    temp = _new_private(path, text)
    try:
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def create_private(path: Path, text: str) -> bool:
    """Make ``path`` (mode 0600) holding ``text``, whole at once; False if it exists (it is
    left as it is)."""
    temp = _new_private(path, text)
    try:
        os.link(temp, path)  # never replaces: two creators cannot both win
    except FileExistsError:
        return False
    finally:
        temp.unlink(missing_ok=True)
    return True


def read_private(path: Path) -> str | None:
    """The text of a private file of ours; None if there is none. A link, another user's
    file, or one the group or others may read or write, is refused with what to do."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:  # ELOOP: a symbolic link where our file should be
        raise InsecureFile(f"cannot open {path} as a file of ours ({exc}): remove it; "
                           "plancast makes a new one when the deployment next starts") from exc
    with os.fdopen(fd, encoding="utf-8") as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise InsecureFile(
                f"{path} is not a file of ours (owner user id {info.st_uid}): remove it; "
                "plancast makes a new one when the deployment next starts")
        if info.st_mode & _OTHERS:
            raise InsecureFile(
                f"{path} may be read by other users (mode {stat.S_IMODE(info.st_mode):04o}), "
                "so its secret may have leaked: stop the deployment, remove the file (a new "
                "secret is made when it next starts) and keep the directory 0700")
        return file.read()


def _new_private(path: Path, text: str) -> Path:
    """A new file beside ``path``, 0600, holding ``text`` on disk."""
    temp = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        with os.fdopen(fd, "w", encoding="utf-8", closefd=False) as file:
            file.write(text)
            file.flush()
            os.fsync(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    finally:
        os.close(fd)
    return temp
