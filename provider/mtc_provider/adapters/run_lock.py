"""The run lock: one object per run name, created with create-if-absent, so two launches never both write.

On Kubernetes it is a ConfigMap `mtc-run-<run_name>` in the JobSet's namespace (409 AlreadyExists: someone
else holds it) -- on GKE and on the local target's cluster alike. It also keeps what must
survive the deletion of an attempt's JobSet: the step history (crash-loop guard) and one record per attempt
(goodput). It is released when the run ends for good (success, final failure, the teardown).

The lock records its owner (DAG, run, task, map index, try: the raw Airflow ids, `owner`) beside the run labels
(`holder`). A launch that finds another owner's lock asks Airflow whether that owner is provably gone (its task
instance ended, or its DAG run no longer exists: `owner_gone`) and only then takes the lock over, with a
compare-and-set on the lock's resourceVersion; anything else is LockHeld, whose message names `mtc unlock`.

It also records the Airflow deployment that wrote it (`adapters.deployment`): a lock of another deployment is never
ours (its run ids may be the same: scheduled runs of one DAG) and never taken over (our Airflow cannot say whether
its owner is gone), and the teardown and release leave it alone. A lock written before deployments were recorded is
taken as this deployment's.
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any, Callable, Mapping

from mtc_provider.adapters.protocols import AlreadyExists, ApiError, NotFound, RunLockApi
from mtc_provider.core.basics import labels as L

HOLDER, HISTORY, ATTEMPTS, OWNER, DEPLOYMENT = "holder", "history", "attempts", "owner", "deployment"
KEYS = (HOLDER, HISTORY, ATTEMPTS, OWNER, DEPLOYMENT)


class LockHeld(Exception):
    """Another DAG run or task holds the run name (and was not provably gone: `why`)."""

    def __init__(self, name: str, holder: Mapping[str, str], why: str = "") -> None:
        self.holder = dict(holder)
        self.why = why
        super().__init__(f"lock {name} is held by DAG {holder.get(L.DAG_ID)}, run {holder.get(L.RUN_ID)}, "
                         f"task {holder.get(L.TASK_ID)}" + (f" ({why})" if why else ""))


def lock_api(connection: Mapping[str, Any], jobset_api: Any) -> RunLockApi:
    """The JobSet api itself when it serves lock objects (Kubernetes -- GKE, any cluster, the local one -- and the
    in-memory cluster)."""
    if all(hasattr(jobset_api, m) for m in ("create_lock", "get_lock", "replace_lock", "delete_lock")):
        return jobset_api
    raise ApiError(501, f"no run lock for connection kind {connection.get('kind')!r}", "NotImplemented")


class RunLock:
    """The lock of one run name, held by one task of one DAG run (its run labels; `owner`: its Airflow ids)."""

    def __init__(self, api: RunLockApi, namespace: str, run_name: str, holder: Mapping[str, str],
                 owner: Mapping[str, Any] | None = None, deployment: str | None = None) -> None:
        from mtc_provider.adapters.deployment import current_deployment

        self.api = api
        self.deployment = deployment or current_deployment()
        self.namespace = namespace
        self.name = L.lock_name(run_name)
        self.holder = dict(holder)
        self.owner = dict(owner or {})
        self.taken_over: str = ""  # why acquire() took the lock over from a gone owner ("" when it did not)
        self._known: tuple[dict[str, Any], str | None] | None = None  # (data, resourceVersion) this lock last wrote

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
        out: dict[str, Any] = {HOLDER: {}, HISTORY: [], ATTEMPTS: [], OWNER: {}, DEPLOYMENT: ""}
        for key in out:
            try:
                out[key] = json.loads(raw[key]) if key in raw else out[key]
            except ValueError:
                pass
        return out

    def _fresh(self) -> dict[str, Any]:
        return {HOLDER: self.holder, HISTORY: [], ATTEMPTS: [], OWNER: self.owner, DEPLOYMENT: self.deployment}

    def _elsewhere(self, data: Mapping[str, Any]) -> str:
        """Why a lock's contents are another deployment's ("" when they are this one's, or record none)."""
        theirs = data.get(DEPLOYMENT) or ""
        if not theirs or theirs == self.deployment:
            return ""
        return (f"it was written by another Airflow deployment ({theirs}; this one is {self.deployment}), whose "
                "task instances this Airflow cannot ask about; if both are one deployment, set [mtc] deployment_id "
                "alike on all its components")

    def held_elsewhere(self) -> str:
        """Why the lock belongs to another Airflow deployment ("" when it is absent or this deployment's)."""
        try:
            return self._elsewhere(self._data(self.api.get_lock(self.namespace, self.name)))
        except NotFound:
            return ""

    def acquire(self, owner_gone: Callable[[Mapping[str, Any]], tuple[bool, str]] | None = None) -> dict[str, Any]:
        """Hold the lock: create it, find it ours (an earlier try: the owner's try is updated), or take it over
        from an owner that `owner_gone(owner)` proves gone; LockHeld otherwise (with why it was not gone)."""
        # Read first: a retry finds its own lock (the resubmission path: one round trip fewer than create-first);
        # creating stays the atomic claim when there is none.
        try:
            obj = self.api.get_lock(self.namespace, self.name)
        except NotFound:
            try:
                obj = self.api.create_lock(self.namespace, self._body(self._fresh()))
            except AlreadyExists:
                obj = self.api.get_lock(self.namespace, self.name)
        data = self._data(obj)
        version = obj.get("metadata", {}).get("resourceVersion")
        self._known = (data, version)
        where = f"{self.namespace}/{self.name}"
        elsewhere = self._elsewhere(data)
        if elsewhere:  # checked before the holder: another deployment's runs may carry the same ids
            raise LockHeld(where, data[HOLDER], elsewhere)
        if data[HOLDER] == self.holder:
            if self.owner and (data[OWNER] != self.owner or not data[DEPLOYMENT]):  # a newer try: record it
                data[OWNER], data[DEPLOYMENT] = self.owner, self.deployment
                with contextlib.suppress(LockHeld):  # advisory: the holder (the run labels) is what counts
                    self._replace_or_held(data, version, data)
            return data
        if not data[OWNER]:
            raise LockHeld(where, data[HOLDER], "it records no owner to ask Airflow about (written by an older "
                                                "provider version, or by hand)")
        gone, why = owner_gone(data[OWNER]) if owner_gone else (False, "no way to ask Airflow here")
        if not gone:
            raise LockHeld(where, data[HOLDER], why)
        fresh = self._fresh()
        self._replace_or_held(fresh, version, data)
        self.taken_over = why
        return fresh

    def _replace_or_held(self, data: dict[str, Any], version: str | None, seen: Mapping[str, Any]) -> None:
        """Compare-and-set on the version read: a concurrent change (409) means someone else moved first."""
        try:
            written = self.api.replace_lock(self.namespace, self.name, self._body(data, version))
            self._known = (data, (written or {}).get("metadata", {}).get("resourceVersion"))
        except ApiError as exc:
            self._known = None
            if exc.status in (404, 409):
                raise LockHeld(f"{self.namespace}/{self.name}", seen.get(HOLDER) or {},
                               "the lock changed while being taken over; try again") from exc
            raise

    def read(self) -> dict[str, Any]:
        try:
            return self._data(self.api.get_lock(self.namespace, self.name))
        except NotFound:
            return {HOLDER: {}, HISTORY: [], ATTEMPTS: [], OWNER: {}, DEPLOYMENT: ""}

    def update(self, change: Callable[[dict[str, Any]], None], tries: int = 5) -> dict[str, Any]:
        """Read, change, compare-and-set; re-read on a conflict. No lock (released): nothing to record."""
        for _ in range(tries):
            known, self._known = self._known, None
            if known is not None and known[1]:  # what this lock last read or wrote: the compare-and-set checks it
                data, version = json.loads(json.dumps(known[0])), known[1]
            else:
                try:
                    obj = self.api.get_lock(self.namespace, self.name)
                except NotFound:
                    return {}
                data, version = self._data(obj), obj["metadata"].get("resourceVersion")
            if data[HOLDER] != self.holder:
                return data
            change(data)
            try:
                written = self.api.replace_lock(self.namespace, self.name, self._body(data, version))
                self._known = (data, (written or {}).get("metadata", {}).get("resourceVersion"))
                return data
            except NotFound:
                if known is None:
                    return {}
            except ApiError as exc:
                if exc.status != 409:
                    raise
        raise ApiError(409, f"lock {self.name} kept changing under us", "Conflict")

    def close_attempt(self, end: Any, now: float) -> None:
        """Close the open record of the ended attempt (a core.attempt.attempt_records.AttemptEnd), as its typed record
        closes it; keys it does not know are kept. Written through adapters.attempt_journal by either end of a try."""
        from mtc_provider.core.attempt.attempt_records import AttemptRecord

        def change(data: dict[str, Any]) -> None:
            for index, stored in enumerate(data[ATTEMPTS]):
                if stored.get("jobset") == end.jobset and stored.get("end") is None:
                    data[ATTEMPTS][index] = {**stored, **AttemptRecord.from_dict(stored).closed(end, now).to_dict()}
        self.update(change)

    def release(self) -> None:
        """Delete the lock when it is ours (this holder, this deployment)."""
        try:
            data = self._data(self.api.get_lock(self.namespace, self.name))
        except NotFound:
            return
        if data[HOLDER] == self.holder and not self._elsewhere(data):
            self.api.delete_lock(self.namespace, self.name)


def unlock(api: RunLockApi, namespace: str, run_name: str) -> dict[str, Any] | None:
    """Delete the lock of `run_name`, whoever holds it (`mtc unlock`); its last contents, or None if absent."""
    name = L.lock_name(run_name)
    try:
        data = RunLock._data(api.get_lock(namespace, name))
    except NotFound:
        return None
    api.delete_lock(namespace, name)
    return data
