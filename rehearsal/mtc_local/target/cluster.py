"""Kubernetes clients for the local target's cluster, built as for any cluster: the cncf.kubernetes provider's
KubernetesHook / AsyncKubernetesHook over `<home>/kubeconfig` (no Airflow connection, no token in hand).

The cluster is started on demand, as a process (`python -m mtc_local.cluster up --home HOME`), when its
kubeconfig is missing or its server does not accept a connection; the TLS check against the kubeconfig's CA on
every call makes sure the answer comes from that home's cluster. Only how the client is made differs from GKE.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, AsyncIterator, Callable
from urllib.parse import urlparse

import yaml

from mtc_provider.adapters.protocols import ApiError

KUBECONFIG = "kubeconfig"
START_TIMEOUT = 60.0


def kubeconfig_path(home: str | os.PathLike[str]) -> Path:
    return Path(home).expanduser().resolve() / KUBECONFIG


def _accepts(path: Path) -> bool:
    try:
        server = yaml.safe_load(path.read_text())["clusters"][0]["cluster"]["server"]
        url = urlparse(server)
        with socket.create_connection((url.hostname, url.port or 443), timeout=2):
            return True
    except (OSError, KeyError, IndexError, TypeError, ValueError, yaml.YAMLError):
        return False


def running_kubeconfig(home: str | os.PathLike[str]) -> Path:
    """The kubeconfig of the home's cluster, started first when it does not answer."""
    path = kubeconfig_path(home)
    if path.exists() and _accepts(path):
        return path
    done = subprocess.run([sys.executable, "-m", "mtc_local.cluster", "up", "--home", str(path.parent)],
                          capture_output=True, text=True, timeout=START_TIMEOUT, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise ApiError(503, (done.stderr or done.stdout).strip()[-500:], "ServiceUnavailable")
    return path


def client_factory(home: str | os.PathLike[str]) -> Callable[[], Any]:
    """A kubernetes.client.ApiClient per call, through KubernetesHook(config_file=<home>/kubeconfig)."""

    def make() -> Any:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

        path = running_kubeconfig(home)
        return KubernetesHook(conn_id=None, kubernetes_conn_id=None, config_file=str(path)).get_conn()

    return make


def async_client_factory(home: str | os.PathLike[str]) -> Callable[[], contextlib.AbstractAsyncContextManager[Any]]:
    """A kubernetes_asyncio ApiClient per use, through AsyncKubernetesHook with the kubeconfig as its
    `kube_config_path` extra; a new hook each time, so a restarted cluster (new port) is found again."""
    # imported here (a trigger builds its api in a thread), not cold on the triggerer's event loop at the first use
    from airflow.providers.cncf.kubernetes.hooks import kubernetes  # noqa: F401

    @contextlib.asynccontextmanager
    async def make() -> AsyncIterator[Any]:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

        path = await asyncio.to_thread(running_kubeconfig, home)
        hook = AsyncKubernetesHook(conn_id=None, kubernetes_conn_id=None,
                                   connection_extras={"kube_config_path": str(path)})
        async with hook.get_conn() as api_client:
            yield api_client

    return make
