"""Which files on this machine the run view may serve, and how it opens them (I/O only).

The run view's file reads take their paths from XComs (the launch task's `checkpoint_dir`), and XComs are written
by task code and by any user the auth manager lets write them. So a path is read only when it lies, as written
(no `..`), under one of `[mtc] run_view_file_roots`: by default the local home's bucket folder
(`<local home>/buckets`, where the local target keeps its runs' checkpoints, events and records).

Every read opens the file once, walking from the root's descriptor one component at a time with O_NOFOLLOW
(`openat`), and serves or parses what that descriptor holds: a symbolic link anywhere under the root is refused,
and a file swapped for a link after a check cannot be followed, because there is no second open. Listings read
entries without following links (lstat). Anything refused is answered as absent (404), never as forbidden, so a
probe learns nothing about the machine's files.

The roots themselves are checked when read (`configured_roots`): absolute, not `/`, not a top-level folder
(`/home`, `/etc`, `/tmp`...), and holding neither `AIRFLOW_HOME` (the metadata database, `airflow.cfg`, the
simple auth manager's passwords) nor the api-server user's home directory (cloud credentials, kubeconfigs).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Iterator

SECTION, OPTION = "mtc", "run_view_file_roots"
SETTING = f"[{SECTION}] {OPTION}"
ALLOWED = ("absolute folders, separated by commas, each at least two levels deep (not `/` nor a top-level folder) "
           "and holding neither AIRFLOW_HOME nor the api-server user's home directory")
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO someone left in a root returns at once (and is then refused as not a regular file).
LEAF_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
CHUNK = 65_536


class FileRootsError(ValueError):
    """`[mtc] run_view_file_roots` names a root the run view refuses to serve."""


class NotServed(LookupError):
    """The path is not a file or folder the run view serves (outside the roots, a link, absent, special)."""


def configured_roots() -> list[Path]:
    """`[mtc] run_view_file_roots` (absolute folders separated by commas), else `<local home>/buckets`.

    Raises FileRootsError naming the setting, the root and what is allowed, for a root that would expose the
    machine: relative (it would depend on the api-server's working directory), `/` or a top-level folder, or a
    folder holding AIRFLOW_HOME or the user's home directory.
    """
    from airflow.configuration import conf

    from mtc_provider.target import default_local_home

    raw = conf.get(SECTION, OPTION, fallback="") or ""
    given = [part.strip() for part in raw.split(",") if part.strip()]
    roots = given or [os.path.join(default_local_home(), "buckets")]
    return [check_root(root, raw if given else None) for root in roots]


def check_root(root: str, raw: str | None = None) -> Path:
    """One root, normalized (`~` expanded, `.`/`..` collapsed, links resolved), or FileRootsError."""
    where = f"{SETTING} = {raw!r}" if raw is not None else f"the default root {root!r} (from MTC_LOCAL_HOME)"

    def refuse(why: str) -> FileRootsError:
        return FileRootsError(f"{where}: root {root!r} {why}; allowed: {ALLOWED}")

    expanded = os.path.expanduser(root)
    if not os.path.isabs(expanded):
        raise refuse("is relative (it would be read from the api-server's working directory)")
    resolved = Path(os.path.realpath(expanded))
    if resolved == Path("/"):
        raise refuse("is / (every file of the machine)")
    for name, held in (("AIRFLOW_HOME", os.environ.get("AIRFLOW_HOME")), ("the user's home directory", "~")):
        if not held:
            continue
        held_path = Path(os.path.realpath(os.path.expanduser(held)))
        if held_path == resolved or resolved in held_path.parents:
            raise refuse(f"holds {name} ({held_path}): its secrets would be served")
    if len(resolved.parts) < 3:  # ('/', 'srv'): /home, /etc, /tmp hold every user's or the system's files
        raise refuse(f"is a top-level folder ({resolved})")
    return resolved


def relative_to_root(path: str | os.PathLike, roots: list[Path] | None = None) -> tuple[Path, tuple[str, ...]] | None:
    """(root, components below it) of an absolute path lying under a root as written; None otherwise.

    Lexical on purpose: the path is later opened component by component without following links, so `..` and
    `.` are refused rather than resolved, and a path that reaches the root only through a link is outside.
    """
    text = os.fspath(path)
    if not text.startswith("/") or "\0" in text:
        return None
    parts = [p for p in text.split("/") if p]
    if any(p in (".", "..") for p in parts):
        return None
    roots = configured_roots() if roots is None else roots
    for root in roots:
        head = root.parts[1:]
        if tuple(parts[: len(head)]) == head:
            return root, tuple(parts[len(head):])
    # A path written through a link above its root (a home folder that is a link): the part naming the root may
    # resolve to it; what lies below the root is still walked without following links.
    for depth in range(2, len(parts) + 1):
        real = Path(os.path.realpath("/" + "/".join(parts[:depth])))
        if real in roots:
            return real, tuple(parts[depth:])
    return None


def allowed(path: str | os.PathLike | None, roots: list[Path] | None = None) -> Path | None:
    """`path` when it lies under a root as written (no `..`) and is a folder or regular file reached without
    following any link; else None."""
    if not path:
        return None
    try:
        fd = open_under(path, roots)
    except NotServed:
        return None
    os.close(fd)
    return Path(os.fspath(path))


def open_under(path: str | os.PathLike, roots: list[Path] | None = None, below: tuple[str, ...] = ()) -> int:
    """A descriptor of `path`/`below`, opened from its root one component at a time without following links.

    The caller owns the descriptor: a folder (O_DIRECTORY) or a regular file, nothing else (NotServed).
    """
    found = relative_to_root(path, roots)
    if found is None:
        raise NotServed(f"{os.fspath(path)!r} is not under {SETTING}")
    root, parts = found
    return open_at(root, parts + tuple(below))


def open_at(root: Path, parts: tuple[str, ...]) -> int:
    """Walk `parts` from the root's descriptor (openat with O_NOFOLLOW on each), returning the last one's."""
    if any(p in ("", ".", "..") or "/" in p or "\0" in p for p in parts):
        raise NotServed(f"{'/'.join(parts)!r} is not a plain path below {root}")
    try:
        fd = os.open(root, DIR_FLAGS & ~os.O_NOFOLLOW)  # the root itself as configured (resolved when read)
    except OSError as exc:
        raise NotServed(f"{root} cannot be opened ({exc.strerror})") from None
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            try:
                nxt = os.open(part, LEAF_FLAGS if last else DIR_FLAGS, dir_fd=fd)
            except OSError as exc:  # ELOOP: a link; ENOTDIR: a file where a folder was named; ENOENT
                raise NotServed(f"{'/'.join(parts[: i + 1])!r} below {root} cannot be opened ({exc.strerror})") \
                    from None
            os.close(fd)
            fd = nxt
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
            raise NotServed(f"{'/'.join(parts)!r} below {root} is neither a folder nor a regular file")
        return fd
    except BaseException:
        os.close(fd)
        raise


def is_dir(fd: int) -> bool:
    return stat.S_ISDIR(os.fstat(fd).st_mode)


def child(dir_fd: int, name: str, directory: bool = False) -> int:
    """A descriptor of one entry of an opened folder, without following a link (NotServed otherwise)."""
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        raise NotServed(f"{name!r} is not an entry name")
    try:
        fd = os.open(name, DIR_FLAGS if directory else LEAF_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        raise NotServed(f"{name!r} cannot be opened ({exc.strerror})") from None
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        os.close(fd)
        raise NotServed(f"{name!r} is neither a folder nor a regular file")
    return fd


def read_text(fd: int, limit: int | None = None) -> str:
    """The text of an opened regular file (closes the descriptor), at most `limit` bytes."""
    with os.fdopen(fd, "rb") as handle:
        return handle.read(-1 if limit is None else limit).decode("utf-8", "replace")


def entries(dir_fd: int) -> list[tuple[str, os.stat_result]]:
    """(name, lstat) of each entry of an opened folder: a link is described as the link, never its target."""
    out = []
    with os.scandir(dir_fd) as found:  # scandir reads a duplicate of the descriptor, rewound
        for entry in found:  # stat while the duplicate is open: the entries' stat() reads through it
            try:
                out.append((entry.name, entry.stat(follow_symlinks=False)))
            except OSError:  # gone since the folder was read
                continue
    return out


def chunks(fd: int) -> Iterator[bytes]:
    """The bytes of an opened regular file, read from that descriptor (closed at the end, or with the iterator
    when a client leaves before the end)."""
    handle = os.fdopen(fd, "rb")

    def read() -> Iterator[bytes]:
        with handle:
            while block := handle.read(CHUNK):
                yield block

    return read()
