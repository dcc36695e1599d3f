"""A local target home's bearer token, `<home>/supervisor.token`: the one secret both of its servers take.

The local Kubernetes API server (`Authorization: Bearer`, kubeconfig) and the local GCS JSON API accept this one
token; whoever can read the file (its owner: mode 0600, in a 0700 home) may use them. The servers create it
(`mtc_local.shared.auth.ensure_token`); clients read it here, with the same checks, so a token others
could read is never used.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
import urllib.request
from pathlib import Path

TOKEN_FILE = "supervisor.token"
PRIVATE_FILE = 0o600
# The local GCS proves it holds the token before a client sends it: HMAC-SHA256(token, PROOF_CONTEXT + nonce).
PROOF_CONTEXT = b"mtc-local-gcs-health:"


class TokenError(Exception):
    """The token file is missing, unreadable or readable by others."""


def token_path(root: str | os.PathLike[str]) -> Path:
    return Path(root) / TOKEN_FILE


def read_token(root: str | os.PathLike[str]) -> bytes | None:
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


def require_token(root: str | os.PathLike[str]) -> str:
    """The home's token as text; TokenError naming the file when there is none."""
    token = read_token(root)
    if token is None:
        raise TokenError(f"{token_path(root)} does not exist: start the home's local GCS or cluster first")
    return token.decode()


def health_proof(token: bytes, nonce: str) -> str:
    return hmac.new(token, PROOF_CONTEXT + nonce.encode(), hashlib.sha256).hexdigest()


def serves_home(endpoint: str, root: str | os.PathLike[str], timeout: float = 2.0) -> bool:
    """The local GCS at `endpoint` holds this home's token: it answers HMAC(token, a fresh nonce) to
    `/_mtc/health?nonce=`, which needs no token. A port freed by a server that exited may be anyone's now, so a
    client asks this before it sends the token there."""
    try:
        token = read_token(root)
    except TokenError:
        return False
    if token is None:
        return False
    nonce = secrets.token_hex(16)
    try:
        with urllib.request.urlopen(f"{endpoint}/_mtc/health?nonce={nonce}", timeout=timeout) as response:
            return hmac.compare_digest(str(json.loads(response.read()).get("proof")), health_proof(token, nonce))
    except (OSError, ValueError, AttributeError):
        return False
