"""The root of a home's ramdisks on tmpfs, `/dev/shm/mtc-<uid>-<hash of home>/`: made private, or refused.

/dev/shm is writable by every user (sticky), and the root's name can be worked out from the home's path, so
another user could make it first, or make it a symbolic link, and then read the checkpoints or steer our writes
elsewhere. So the root is created with `os.mkdir(mode=0o700)` and then checked with `os.lstat` (never following
a link): a directory of this uid that nobody else may write into. Anything else is refused with an error naming
the path, what it is and what is expected; a root of ours that is only readable by others (an older version's)
is tightened to 0700. Everything below it is then reachable by this user only, and the sticky bit keeps others
from renaming or removing it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

PRIVATE_DIR = 0o700


class RamdiskRootError(RuntimeError):
    """The ramdisk root exists and is not this user's private directory."""


def _owner(uid: int) -> str:
    import pwd

    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def check_private_root(path: Path) -> bool:
    """True when `path` is this user's private directory, False when it does not exist; RamdiskRootError else."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    expected = f"expected a directory owned by {_owner(os.getuid())} with mode 0700"
    remedy = "another user may have made it first: remove it, or set MTC_RUNNER_SHM_ROOT to a directory of yours"
    if stat.S_ISLNK(info.st_mode):
        raise RamdiskRootError(f"ramdisk root {path} is a symbolic link to {os.readlink(path)!r} owned by "
                               f"{_owner(info.st_uid)}; {expected}; {remedy}")
    if not stat.S_ISDIR(info.st_mode):
        raise RamdiskRootError(f"ramdisk root {path} is not a directory (owned by {_owner(info.st_uid)}); "
                               f"{expected}; {remedy}")
    mode = stat.S_IMODE(info.st_mode)
    if info.st_uid != os.getuid():
        raise RamdiskRootError(f"ramdisk root {path} is owned by {_owner(info.st_uid)} (mode {mode:04o}); "
                               f"{expected}; {remedy}")
    if mode & 0o022:  # others could have put entries (links) into it: nothing inside can be trusted
        raise RamdiskRootError(f"ramdisk root {path} is writable by others (mode {mode:04o}); {expected}; "
                               "remove it and start again")
    if mode != PRIVATE_DIR:
        os.chmod(path, PRIVATE_DIR, follow_symlinks=False)
    return True


def ensure_private_root(path: Path) -> Path:
    """The ramdisk root, created 0700 when absent, checked when present (RamdiskRootError when not ours)."""
    path.parent.mkdir(parents=True, exist_ok=True)  # /dev/shm itself, or MTC_RUNNER_SHM_ROOT
    try:
        os.mkdir(path, PRIVATE_DIR)
    except FileExistsError:
        pass
    check_private_root(path)
    return path
