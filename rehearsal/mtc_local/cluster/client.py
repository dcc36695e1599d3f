"""`LocalCluster`: the JobSet adapter class GKE uses (KubernetesJobSetApi), on a home's local cluster through the
provider's own client factory (mtc_local/target/cluster.py), plus what only a local cluster has: the runner's records
(faults fired, pod processes, log files), for the demo, benchmarks and tests.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mtc_provider.adapters.kubernetes import KubernetesJobSetApi
from mtc_local.target.cluster import async_client_factory, client_factory, running_kubeconfig
from mtc_provider.core.basics.vocabulary import DELETE_UNSPECIFIED
from mtc_local.shared.state import Home, read_json, read_jsonl

__all__ = ["LocalCluster", "async_client_factory", "client_factory"]


class LocalCluster(KubernetesJobSetApi):
    """The JobSet adapter (KubernetesJobSetApi) on a home's local cluster, plus the runner's local records."""

    def __init__(self, home: str | os.PathLike[str]) -> None:
        self.home = Home.of(home)
        super().__init__(client_factory(self.home.root), where=f"local cluster of {self.home.root}")

    @property
    def kubeconfig(self) -> Path:
        return running_kubeconfig(self.home.root)

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

    def delete(self, namespace: str, name: str, reason: str = DELETE_UNSPECIFIED, timeout: float | None = 90.0) -> None:
        """Delete (foreground) and, unless `timeout` is None, wait until the JobSet is gone, as `kubectl delete`
        waits: its pods have terminated (SIGTERM, SIGKILL after the grace period) and its ramdisks are removed."""
        super().delete(namespace, name, reason)
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
