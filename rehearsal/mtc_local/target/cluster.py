"""Kubernetes clients for the local target's cluster, built from `<home>/kubeconfig` (no Airflow connection, no token
in hand): the sync client by the kubernetes library's own kubeconfig loader, as `mtc --kubeconfig` and
`MtcJobSetHook(kubeconfig=...)` build theirs; the async one through the cncf.kubernetes provider's AsyncKubernetesHook.
The sync client skips KubernetesHook because importing its module loads kubernetes_asyncio and Airflow's Connection
model, which a task process's sync requests never use: that was most of the cost of the first request of an
Airflow retry (`benchmarks/retry_setup.py`).

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
    """A kubernetes.client.ApiClient per call, from <home>/kubeconfig (its server, its CA, its bearer token): what
    KubernetesHook(config_file=...).get_conn() loads from the same file, without importing the cncf.kubernetes hook
    module. The adapter sets every request's timeout itself (KubernetesJobSetApi.request_timeout)."""

    def make() -> Any:
        from kubernetes import config

        return config.new_client_from_config(config_file=str(running_kubeconfig(home)))

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
