"""Kubernetes clients for a home's local cluster, built the way the provider builds them for any cluster: the
cncf.kubernetes provider's KubernetesHook / AsyncKubernetesHook over <home>/kubeconfig (no Airflow connection).

Each client is built from the kubeconfig path alone (a primitive a trigger can carry; the token stays in the file),
after making sure the cluster runs (started on demand, as the old local runner was). `LocalCluster` adds what only
a local cluster has to the same JobSet adapter class GKE uses: the runner's records (faults fired, pod processes,
log files), for the demo, benchmarks and tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from mtc_provider.adapters.kubernetes import KubernetesJobSetApi
from mtc_provider.local.cluster import kubeconfig
from mtc_provider.local.cluster.lifecycle import ensure_running, supervisor_pid
from mtc_provider.local.runner.state import Home, read_json, read_jsonl


def _running_kubeconfig(home: Home) -> Path:
    # The PID check is cheap; the full check (an authenticated request) only when it fails.
    if supervisor_pid(home) is not None and kubeconfig.path(home.root).exists():
        return kubeconfig.path(home.root)
    return ensure_running(home.root)


def client_factory(home: str | os.PathLike[str]) -> Callable[[], Any]:
    """A kubernetes.client.ApiClient per call, through KubernetesHook(config_file=<home>/kubeconfig)."""
    where = Home.of(home)

    def make() -> Any:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

        path = _running_kubeconfig(where)
        return KubernetesHook(conn_id=None, kubernetes_conn_id=None, config_file=str(path)).get_conn()

    return make


def async_client_factory(home: str | os.PathLike[str]) -> Callable[[], contextlib.AbstractAsyncContextManager[Any]]:
    """A kubernetes_asyncio ApiClient per use, through AsyncKubernetesHook with the kubeconfig as its
    `kube_config_path` extra; a new hook each time, so a restarted cluster (new port) is found again."""
    where = Home.of(home)

    @contextlib.asynccontextmanager
    async def make() -> AsyncIterator[Any]:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

        path = await asyncio.to_thread(_running_kubeconfig, where)
        hook = AsyncKubernetesHook(conn_id=None, kubernetes_conn_id=None,
                                   connection_extras={"kube_config_path": str(path)})
        async with hook.get_conn() as api_client:
            yield api_client

    return make


class LocalCluster(KubernetesJobSetApi):
    """The JobSet adapter (KubernetesJobSetApi) on a home's local cluster, plus the runner's local records."""

    def __init__(self, home: str | os.PathLike[str]) -> None:
        self.home = Home.of(home)
        super().__init__(client_factory(self.home.root))

    @property
    def kubeconfig(self) -> Path:
        return _running_kubeconfig(self.home)

    def faults(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """Injected faults of the JobSet so far: kind, slice, host, ts (unix), time, step, restart, pids."""
        return read_jsonl(self.home.faults_file(namespace, name))

    def run_faults(self, namespace: str, run_name: str) -> list[dict[str, Any]]:
        """Faults fired for a whole training run, across its resubmitted JobSets (each record names its JobSet)."""
        return read_jsonl(self.home.faults_file(namespace, f"run-{run_name}"))

    def pods(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """The current attempt's processes: name, slice, host, processId, pid, restart, log, ramdisk, exitCode, step."""
        return (read_json(self.home.pods_file(namespace, name)) or {}).get("pods", [])

    def log_dir(self, namespace: str, name: str) -> Path:
        return self.home.log_dir(namespace, name)

    def list(self, namespace: str, label_selector: str = "") -> list[dict[str, Any]]:
        return super().list(namespace, label_selector)

    def delete(self, namespace: str, name: str, timeout: float | None = 90.0) -> None:
        """Delete (foreground) and, unless `timeout` is None, wait until the JobSet is gone, as `kubectl delete`
        waits: its pods have terminated (SIGTERM, SIGKILL after the grace period) and its ramdisks are removed."""
        super().delete(namespace, name)
        if timeout is not None:
            self.wait_deleted(namespace, name, timeout)

    def wait_deleted(self, namespace: str, name: str, timeout: float = 60.0) -> None:
        """Until the JobSet is gone (a foreground delete: its pods have terminated), as `kubectl delete --wait`."""
        import time

        from mtc_provider.adapters.protocols import ApiError, NotFound

        deadline = time.monotonic() + timeout
        while True:
            try:
                self.get(namespace, name)
            except NotFound:
                return
            if time.monotonic() > deadline:
                raise ApiError(504, f"JobSet {namespace}/{name} still terminating after {timeout:.0f}s", "Timeout")
            time.sleep(0.05)
