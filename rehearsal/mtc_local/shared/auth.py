"""Who may talk to a home's local cluster: whoever can read <home>/supervisor.token (its owner only, mode 0600).

The token is the API server's bearer token and the local GCS's (one token per home; its name and the checked read
are in mtc_local.token, which clients use). It reaches kubectl through <home>/kubeconfig (0600
too), over TLS checked against the home's own CA (local/cluster/pki.py).
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from mtc_local.token import PRIVATE_FILE, TOKEN_FILE, TokenError, read_token, token_path

PRIVATE_DIR = 0o700
__all__ = ["PRIVATE_DIR", "PRIVATE_FILE", "TOKEN_FILE", "TokenError", "ensure_token", "make_private_dir",
           "read_token", "token_path"]


def make_private_dir(path: Path) -> None:
    """Create (or tighten) a directory only its owner can enter."""
    path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    if stat.S_IMODE(path.stat().st_mode) != PRIVATE_DIR:
        os.chmod(path, PRIVATE_DIR)


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
