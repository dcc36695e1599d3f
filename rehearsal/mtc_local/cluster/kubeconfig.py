"""`<home>/kubeconfig`: how kubectl and the provider's clients reach the local API server.

The format is kubectl's (https://kubernetes.io/docs/concepts/configuration/organize-cluster-access-kubeconfig/): an
HTTPS server with its CA (pki.py), and a bearer token, the home's supervisor.token, so the file is private (0600)
like the token itself.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

import yaml

from mtc_local.shared import auth

FILE = "kubeconfig"
CONTEXT = "mtc-local"


def path(home_root: Path) -> Path:
    return home_root / FILE


def render(server: str, token: bytes, ca_pem: bytes, namespace: str = "default") -> dict:
    cluster = {"server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()}
    return {
        "apiVersion": "v1", "kind": "Config", "preferences": {}, "current-context": CONTEXT,
        "clusters": [{"name": CONTEXT, "cluster": cluster}],
        "users": [{"name": CONTEXT, "user": {"token": token.decode()}}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": namespace}}],
    }


def write(home_root: Path, server: str, token: bytes, ca_pem: bytes) -> Path:
    """Write the kubeconfig atomically, readable by its owner only."""
    target = path(home_root)
    tmp = home_root / f".{FILE}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, auth.PRIVATE_FILE)
    with os.fdopen(fd, "w") as handle:
        yaml.safe_dump(render(server, token, ca_pem), handle, sort_keys=False)
    os.replace(tmp, target)
    return target


def server_port(home_root: Path) -> int:
    """The port the last API server of this home used (0 when unknown): a restart tries it first."""
    try:
        config = yaml.safe_load(path(home_root).read_text()) or {}
        return int(config["clusters"][0]["cluster"]["server"].rsplit(":", 1)[1])
    except (OSError, KeyError, IndexError, ValueError, TypeError, yaml.YAMLError):
        return 0
