"""Who may talk to a home's local cluster: whoever can read <home>/supervisor.token (its owner only, mode 0600).

The token is the API server's bearer token; it reaches clients only through <home>/kubeconfig (0600 too), which
travels over TLS checked against the home's own CA (local/cluster/pki.py).
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

TOKEN_FILE = "supervisor.token"
PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700


class TokenError(Exception):
    """The token file is missing, unreadable or readable by others."""


def token_path(root: Path) -> Path:
    return root / TOKEN_FILE


def make_private_dir(path: Path) -> None:
    """Create (or tighten) a directory only its owner can enter."""
    path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    if stat.S_IMODE(path.stat().st_mode) != PRIVATE_DIR:
        os.chmod(path, PRIVATE_DIR)


def read_token(root: Path) -> bytes | None:
    """The home's token, or None when there is none yet; TokenError when others could read it."""
    path = token_path(root)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise TokenError(f"cannot read {path}: {err}") from err
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
            raise TokenError(f"{path} must belong to uid {os.getuid()} with mode 0600 "
                             f"(it has uid {info.st_uid}, mode {oct(stat.S_IMODE(info.st_mode))})")
        token = handle.read().strip()
    return token or None


def ensure_token(root: Path) -> bytes:
    """The home's token, created (0600, atomically) when absent; a token others could read is replaced."""
    try:
        token = read_token(root)
    except TokenError:
        token = None
        token_path(root).unlink(missing_ok=True)
    if token:
        return token
    fresh = secrets.token_hex(32).encode()
    tmp = root / f".{TOKEN_FILE}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, PRIVATE_FILE)
    with os.fdopen(fd, "wb") as handle:
        handle.write(fresh + b"\n")
    try:
        os.link(tmp, token_path(root))  # never replaces a token another supervisor wrote first
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    token = read_token(root)
    if token is None:
        raise TokenError(f"{token_path(root)} vanished while it was created")
    return token
