"""The local API server in this process, without TLS, with its outage switch (local/cluster/faults.py), behind a
kubeconfig in a home: the "local" connection then reaches it through the real `kubernetes` client (the operator's)
and the cncf.kubernetes async hook's `kubernetes_asyncio` client (a trigger's), exactly as they do."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from mtc_local.cluster.apiserver import ApiServer
from mtc_local.cluster.resources import JOBSETS, NAMESPACES
from mtc_local.cluster.store import Store

TOKEN = "outage-test-token"


class _NoController:
    """Nothing runs behind these JobSets: the test writes their status into the store, as the controller would."""

    def create_jobset(self, namespace, obj):  # pragma: no cover - the tests seed objects directly
        raise NotImplementedError

    def __init__(self, store: Store) -> None:
        self.store = store

    def delete_jobset(self, namespace, name, propagation):
        """Background deletion, the API's default: the JobSet is removed at once (nothing runs behind it here), as
        https://kubernetes.io/docs/concepts/architecture/garbage-collection/#background-deletion describes."""
        self.store.remove(JOBSETS, namespace, name)
        return None

    def update_jobset(self, namespace, name, change, dry_run=False):  # pragma: no cover
        raise NotImplementedError

    def delete_pod(self, namespace, name, grace_seconds):  # pragma: no cover
        raise NotImplementedError

    def pod(self, namespace, name):  # pragma: no cover
        return None


class OutageCluster:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.store = Store()
        self.store.put(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})
        self.server = ApiServer(self.store, _NoController(self.store), TOKEN.encode()).start()
        home.mkdir(parents=True, exist_ok=True)
        (home / "kubeconfig").write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "local",
            "clusters": [{"name": "local", "cluster": {"server": f"http://127.0.0.1:{self.server.port}"}}],
            "users": [{"name": "local", "user": {"token": TOKEN}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "local"}}],
        }))
        self.connection = {"kind": "local", "home": str(home)}

    @property
    def faults(self):
        return self.server.faults

    def put_jobset(self, body: dict[str, Any], status: dict[str, Any] | None = None) -> str:
        obj = copy.deepcopy(body)
        obj["metadata"].setdefault("namespace", "default")
        obj["status"] = status or {}
        return self.store.put(JOBSETS, obj)

    def set_status(self, name: str, status: dict[str, Any]) -> str:
        obj = self.store.get(JOBSETS, "default", name)
        obj["status"] = status
        return self.store.put(JOBSETS, obj)

    def has_jobset(self, name: str) -> bool:
        return any(key[2] == name for key in self.store.objects if key[0] == JOBSETS.plural)

    def stop(self) -> None:
        self.faults.set("none")
        self.server.stop()
