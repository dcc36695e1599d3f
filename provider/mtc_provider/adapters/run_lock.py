"""The run lock: one object per run name, created with create-if-absent, so two launches never both write.

A ConfigMap `mtc-run-<run_name>` in the JobSet's namespace (409 AlreadyExists: someone else holds it). It also keeps
what must survive an attempt's JobSet: the step history (crash-loop guard), the attempt records and the run's ledger.
A launch takes another owner's lock over only when Airflow says that owner is gone (`owner_gone`), with a
compare-and-set on its resourceVersion; else LockHeld, naming `mtc unlock`. The lock is keyed by where the JobSet
runs, so a launch first claims what it writes (`claim_name`: `mtc-ckpt-<sha256 of the checkpoint directory>` in
`[mtc] lock_namespace`), recorded in the run lock so that releasing one releases both. A lock of another Airflow
deployment (`adapters.deployment`) is never ours nor taken over: its run ids may equal ours. docs/security.md
walks the rules.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from typing import Any, Callable, Mapping

from mtc_provider.adapters.protocols import AlreadyExists, ApiError, NotFound, RunLockApi
from mtc_provider.core.basics import labels as L

HOLDER, HISTORY, ATTEMPTS, OWNER, DEPLOYMENT = "holder", "history", "attempts", "owner", "deployment"
CLAIM = "claim"  # in a run lock: the claim it holds; in a claim: the directory and the run lock it belongs to
LEDGER = "ledger"  # the run's ledger (core.attempt.ledger, written through adapters.run_ledger)
KEYS = (HOLDER, HISTORY, ATTEMPTS, OWNER, DEPLOYMENT, CLAIM, LEDGER)
NAMESPACE = "namespace"  # a claim's holder: the run labels and the namespace the JobSet runs in
CLAIM_PREFIX = "mtc-ckpt-"
DEFAULT_LOCK_NAMESPACE = "default"  # every Kubernetes cluster has it


class LockHeld(Exception):
    """Another DAG run or task holds the run name or the checkpoint directory (and was not provably gone: `why`).
    `where` is the lock object (namespace/name); `directory` the checkpoint directory when it is a claim."""

    def __init__(self, name: str, holder: Mapping[str, str], why: str = "", directory: str = "") -> None:
        self.holder = dict(holder)
        self.why = why
        self.where = name
        self.directory = directory
        what = f"checkpoint directory {directory} (lock {name})" if directory else f"lock {name}"
        place = f" in namespace {holder[NAMESPACE]}" if holder.get(NAMESPACE) else ""
        super().__init__(f"{what} is held by DAG {holder.get(L.DAG_ID)}, run {holder.get(L.RUN_ID)}, "
                         f"task {holder.get(L.TASK_ID)}{place}" + (f" ({why})" if why else ""))


def normalized_directory(checkpoint_dir: str) -> str:
    """One spelling per directory: gs://BUCKET/PATH without doubled or trailing slashes (bucket names are lower
    case; object names are case-sensitive), a local path absolute and normalized (file:// dropped)."""
    text = checkpoint_dir.strip()
    if text.startswith("gs://"):
        bucket, _, path = text[len("gs://"):].partition("/")
        parts = [part for part in path.split("/") if part]
        return "/".join([f"gs://{bucket.lower()}", *parts])
    path = text[len("file://"):] if text.startswith("file://") else text
    return os.path.normpath(path)


def claim_name(checkpoint_dir: str) -> str:
    """The claim's ConfigMap name: a DNS-1123 name of 49 characters whatever the directory."""
    return CLAIM_PREFIX + hashlib.sha256(normalized_directory(checkpoint_dir).encode()).hexdigest()[:40]


def lock_namespace() -> str:
    """The namespace every launch's checkpoint claims live in (`[mtc] lock_namespace`)."""
    from airflow.configuration import conf

    return (conf.get("mtc", "lock_namespace", fallback="") or "").strip() or DEFAULT_LOCK_NAMESPACE


def lock_api(connection: Mapping[str, Any], jobset_api: Any) -> RunLockApi:
    """The JobSet api itself when it serves lock objects (Kubernetes -- GKE, any cluster, the local one -- and the
    in-memory cluster)."""
    if all(hasattr(jobset_api, m) for m in ("create_lock", "get_lock", "replace_lock", "delete_lock")):
        return jobset_api
    raise ApiError(501, f"no run lock for connection kind {connection.get('kind')!r}", "NotImplemented")


class RunLock:
    """The lock of one run name, held by one task of one DAG run (its run labels; `owner`: its Airflow ids)."""

    def __init__(self, api: RunLockApi, namespace: str, run_name: str, holder: Mapping[str, str],
                 owner: Mapping[str, Any] | None = None, deployment: str | None = None,
                 claims_namespace: str | None = None, name: str | None = None) -> None:
        self.api = api
        self._deployment = deployment
        self.namespace = namespace
        self.name = name or L.lock_name(run_name)
        self.holder = dict(holder)
        self.owner = dict(owner or {})
        self.claims_namespace = claims_namespace
        self.taken_over: str = ""  # why acquire() took the lock over from a gone owner ("" when it did not)
        self.created = False  # acquire() made the lock object
        self.claim: dict[str, Any] = {}  # what acquire(checkpoint_dir=...) claimed (CLAIM's record)
        self._known: tuple[dict[str, Any], str | None] | None = None  # (data, resourceVersion) this lock last wrote

    @property
    def deployment(self) -> str:
        """This Airflow deployment's id (adapters.deployment), read when first needed."""
        if self._deployment is None:
            from mtc_provider.adapters.deployment import current_deployment

            self._deployment = current_deployment()
        return self._deployment

    def _claim_lock(self, record: Mapping[str, Any]) -> "RunLock":
        """The claim object `record` names, held by this lock's holder in this lock's namespace."""
        return RunLock(self.api, record[NAMESPACE], self.holder.get(L.RUN_NAME, ""),
                       {**self.holder, NAMESPACE: self.namespace}, self.owner, self._deployment, name=record["name"])

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
        out: dict[str, Any] = {HOLDER: {}, HISTORY: [], ATTEMPTS: [], OWNER: {}, DEPLOYMENT: "", CLAIM: {}, LEDGER: {}}
        for key in out:
            try:
                out[key] = json.loads(raw[key]) if key in raw else out[key]
            except ValueError:
                pass
        return out

    def _fresh(self) -> dict[str, Any]:
        return {HOLDER: self.holder, HISTORY: [], ATTEMPTS: [], OWNER: self.owner, DEPLOYMENT: self.deployment,
                CLAIM: self.claim, LEDGER: {}}

    def elsewhere(self, data: Mapping[str, Any]) -> str:
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
            return self.elsewhere(self._data(self.api.get_lock(self.namespace, self.name)))
        except NotFound:
            return ""

    def acquire(self, owner_gone: Callable[[Mapping[str, Any]], tuple[bool, str]] | None = None,
                checkpoint_dir: str | None = None) -> dict[str, Any]:
        """Hold the lock: create it, find it ours (an earlier try: the owner's try is updated), or take it over
        from an owner that `owner_gone(owner)` proves gone; LockHeld otherwise (with why it was not gone).

        With `checkpoint_dir`, first claim the directory (the same rules, in the shared lock namespace): another
        namespace's or run name's launch writing it is LockHeld naming that holder and its namespace."""
        if not checkpoint_dir:
            return self._acquire(owner_gone)
        record = {NAMESPACE: self.claims_namespace or lock_namespace(), "name": claim_name(checkpoint_dir)}
        claim = self._claim_lock(record)
        claim.claim = {"checkpoint_dir": normalized_directory(checkpoint_dir), "lock": f"{self.namespace}/{self.name}"}
        try:
            claim.acquire(owner_gone)
        except LockHeld as exc:
            raise LockHeld(exc.where, exc.holder, exc.why, normalized_directory(checkpoint_dir)) from None
        fresh = claim.created or bool(claim.taken_over)
        if claim.taken_over:
            self.taken_over = f"checkpoint claim {record[NAMESPACE]}/{record['name']}: {claim.taken_over}"
        self.claim = record
        try:
            return self._acquire(owner_gone)
        except BaseException:
            if fresh:  # claimed for this launch only: the run name is someone else's, so is the directory
                with contextlib.suppress(Exception):
                    claim.release()
            raise

    def _acquire(self, owner_gone: Callable[[Mapping[str, Any]], tuple[bool, str]] | None) -> dict[str, Any]:
        # Read first: a retry finds its own lock (the resubmission path: one round trip fewer than create-first);
        # creating stays the atomic claim when there is none.
        try:
            obj = self.api.get_lock(self.namespace, self.name)
        except NotFound:
            try:
                obj = self.api.create_lock(self.namespace, self._body(self._fresh()))
                self.created = True
            except AlreadyExists:
                obj = self.api.get_lock(self.namespace, self.name)
        data = self._data(obj)
        version = obj.get("metadata", {}).get("resourceVersion")
        self._known = (data, version)
        where = f"{self.namespace}/{self.name}"
        elsewhere = self.elsewhere(data)
        if elsewhere:  # checked before the holder: another deployment's runs may carry the same ids
            raise LockHeld(where, data[HOLDER], elsewhere)
        if data[HOLDER] == self.holder:
            stale = data[OWNER] != self.owner or not data[DEPLOYMENT] or (self.claim and data[CLAIM] != self.claim)
            if self.owner and stale:  # a newer try, or a claim not yet recorded: record it
                data[OWNER], data[DEPLOYMENT] = self.owner, self.deployment
                data[CLAIM] = self.claim or data[CLAIM]
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
            return {HOLDER: {}, HISTORY: [], ATTEMPTS: [], OWNER: {}, DEPLOYMENT: "", CLAIM: {}, LEDGER: {}}

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

    def close_attempt(self, end: Any, now: float, also: Callable[[dict[str, Any]], None] | None = None,
                      once: bool = False) -> bool:
        """Close the open record of the ended attempt (a core.attempt.attempt_records.AttemptEnd), as its typed record
        closes it; keys it does not know are kept. Written through adapters.attempt_journal by either end of a try.
        `also`: a further change written in the same compare-and-set (the end's facts in the run's ledger); with
        `once`, only by the write that closes the record (another writer closed it first: nothing is added).
        Returns whether this write closed it."""
        from mtc_provider.core.attempt.attempt_records import AttemptRecord

        closed = [False]

        def change(data: dict[str, Any]) -> None:
            closed[0] = False  # a compare-and-set that conflicts runs the change again on the newer data
            for index, stored in enumerate(data[ATTEMPTS]):
                if stored.get("jobset") == end.jobset and stored.get("end") is None:
                    data[ATTEMPTS][index] = {**stored, **AttemptRecord.from_dict(stored).closed(end, now).to_dict()}
                    closed[0] = True
            if also is not None and (closed[0] or not once):
                also(data)
        self.update(change)
        return closed[0]

    def release(self) -> None:
        """Delete the lock when it is ours (this holder, this deployment)."""
        try:
            data = self._data(self.api.get_lock(self.namespace, self.name))
        except NotFound:
            return
        if data[HOLDER] == self.holder and not self.elsewhere(data):
            self.api.delete_lock(self.namespace, self.name)
            if data[CLAIM].get("name") and data[CLAIM].get(NAMESPACE):
                self._claim_lock(data[CLAIM]).release()


def unlock(api: RunLockApi, namespace: str, run_name: str) -> dict[str, Any] | None:
    """Delete the lock of `run_name`, whoever holds it (`mtc unlock`), and the checkpoint claim it records; its last
    contents, or None if absent."""
    name = L.lock_name(run_name)
    try:
        data = RunLock._data(api.get_lock(namespace, name))
    except NotFound:
        return None
    api.delete_lock(namespace, name)
    claim = data[CLAIM]
    if claim.get("name") and claim.get(NAMESPACE):
        with contextlib.suppress(NotFound):
            held = RunLock._data(api.get_lock(claim[NAMESPACE], claim["name"]))
            if held[HOLDER].get(NAMESPACE) == namespace and held[HOLDER].get(L.RUN_NAME) == data[HOLDER].get(L.RUN_NAME):
                api.delete_lock(claim[NAMESPACE], claim["name"])  # only the claim this run lock made
    return data


def unclaim(api: RunLockApi, checkpoint_dir: str, namespace: str | None = None) -> dict[str, Any] | None:
    """Delete the claim on `checkpoint_dir`, whoever holds it (`mtc unlock --checkpoint-dir`); its last contents,
    or None if absent. The holder's run lock, in its own namespace, is left: it no longer stops this directory."""
    where, name = namespace or lock_namespace(), claim_name(checkpoint_dir)
    try:
        data = RunLock._data(api.get_lock(where, name))
    except NotFound:
        return None
    api.delete_lock(where, name)
    return data
