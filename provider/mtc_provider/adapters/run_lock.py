"""The run lock: one object per run name, created with create-if-absent, so two launches never both write.

On Kubernetes it is a ConfigMap `mtc-run-<run_name>` in the JobSet's namespace (409 AlreadyExists: someone
else holds it) -- on GKE and on the local target's cluster alike. It also keeps what must
survive the deletion of an attempt's JobSet: the step history (crash-loop guard) and one record per attempt
(goodput). It is released when the run ends for good (success, final failure, the teardown).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping

from mtc_provider.adapters.protocols import AlreadyExists, ApiError, NotFound, RunLockApi
from mtc_provider.core import labels as L

HOLDER, HISTORY, ATTEMPTS = "holder", "history", "attempts"


class LockHeld(Exception):
    """Another DAG run or task holds the run name."""

    def __init__(self, name: str, holder: Mapping[str, str]) -> None:
        self.holder = dict(holder)
        super().__init__(f"lock {name} is held by DAG {holder.get(L.DAG_ID)}, run {holder.get(L.RUN_ID)}, "
                         f"task {holder.get(L.TASK_ID)}")


def lock_api(connection: Mapping[str, Any], jobset_api: Any) -> RunLockApi:
    """The JobSet api itself when it serves lock objects (Kubernetes -- GKE, any cluster, the local one -- and the
    in-memory cluster)."""
    if all(hasattr(jobset_api, m) for m in ("create_lock", "get_lock", "replace_lock", "delete_lock")):
        return jobset_api
    raise ApiError(501, f"no run lock for connection kind {connection.get('kind')!r}", "NotImplemented")


class RunLock:
    """The lock of one run name, held by one task of one DAG run (its run labels)."""

    def __init__(self, api: RunLockApi, namespace: str, run_name: str, holder: Mapping[str, str]) -> None:
        self.api = api
        self.namespace = namespace
        self.name = L.lock_name(run_name)
        self.holder = dict(holder)

    def _body(self, data: Mapping[str, Any], resource_version: str | None = None) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": self.name, "labels": {L.MANAGED_BY: L.MANAGED_BY_VALUE,
                                                                   L.RUN_NAME: self.holder[L.RUN_NAME]}}
        if resource_version:
            metadata["resourceVersion"] = resource_version
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata,
                "data": {key: json.dumps(value) for key, value in data.items()}}

    @staticmethod
    def _data(obj: Mapping[str, Any]) -> dict[str, Any]:
        raw = obj.get("data") or {}
        out: dict[str, Any] = {HOLDER: {}, HISTORY: [], ATTEMPTS: []}
        for key in out:
            try:
                out[key] = json.loads(raw[key]) if key in raw else out[key]
            except ValueError:
                pass
        return out

    def acquire(self) -> dict[str, Any]:
        """Hold the lock (create it, or find it already ours from an earlier try); LockHeld when it is not ours."""
        try:
            obj = self.api.create_lock(self.namespace, self._body({HOLDER: self.holder, HISTORY: [], ATTEMPTS: []}))
        except AlreadyExists:
            obj = self.api.get_lock(self.namespace, self.name)
        data = self._data(obj)
        if data[HOLDER] != self.holder:
            raise LockHeld(f"{self.namespace}/{self.name}", data[HOLDER])
        return data

    def read(self) -> dict[str, Any]:
        try:
            return self._data(self.api.get_lock(self.namespace, self.name))
        except NotFound:
            return {HOLDER: {}, HISTORY: [], ATTEMPTS: []}

    def update(self, change: Callable[[dict[str, Any]], None], tries: int = 5) -> dict[str, Any]:
        """Read, change, compare-and-set; re-read on a conflict. No lock (released): nothing to record."""
        for _ in range(tries):
            try:
                obj = self.api.get_lock(self.namespace, self.name)
            except NotFound:
                return {}
            data = self._data(obj)
            if data[HOLDER] != self.holder:
                return data
            change(data)
            try:
                self.api.replace_lock(self.namespace, self.name,
                                      self._body(data, obj["metadata"].get("resourceVersion")))
                return data
            except ApiError as exc:
                if exc.status != 409:
                    raise
        raise ApiError(409, f"lock {self.name} kept changing under us", "Conflict")

    def release(self) -> None:
        """Delete the lock when it is ours."""
        try:
            data = self._data(self.api.get_lock(self.namespace, self.name))
        except NotFound:
            return
        if data[HOLDER] == self.holder:
            self.api.delete_lock(self.namespace, self.name)
