"""The API server's object store: one global resourceVersion, an event history for watches, optional files.

Semantics, from https://kubernetes.io/docs/reference/using-api/api-concepts/:
- every write bumps one cluster-wide resourceVersion, stamped on the object (#resource-versions);
- a list answers the store's current resourceVersion in its metadata (#the-resourceversion-parameter);
- a watch with no resourceVersion (or "0") first sends ADDED for what exists, then changes; from version N it sends
  every change after N, and when N is older than the history kept it ends with an ERROR event 410 Expired
  (#efficient-detection-of-changes, #410-gone-responses); with allowWatchBookmarks it sends BOOKMARK events that
  carry only the current resourceVersion (#watch-bookmarks);
- create of an existing name is 409 AlreadyExists; an update carrying a metadata.resourceVersion that is not the
  current one is 409 Conflict (optimistic concurrency, #resource-versions).
Objects of `persisted` resources are also written to files, so a restarted server keeps them (the run lock).
"""

from __future__ import annotations

import copy
import threading
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any, Iterator

from mtc_local.cluster import errors
from mtc_local.cluster.resources import Resource
from mtc_local.cluster.selectors import matcher
from mtc_local.shared.state import read_json, write_json

CLUSTER_SCOPE = "_cluster"  # the file folder of cluster-scoped objects


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Store:
    def __init__(self, persist_root: Path | None = None, persisted: tuple[Resource, ...] = (),
                 history: int = 4096) -> None:
        self.cond = threading.Condition()
        self.rv = 0
        self.compacted = 0  # events at or below this resourceVersion are no longer kept
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.events: deque[tuple[int, str, str, dict[str, Any]]] = deque()
        self.history = history
        self.persist_root = persist_root
        self.persisted = {r.plural for r in persisted}

    # ---- persistence -----------------------------------------------------------------------------
    def _file(self, plural: str, namespace: str, name: str) -> Path | None:
        if self.persist_root is None or plural not in self.persisted:
            return None
        return self.persist_root / plural / (namespace or CLUSTER_SCOPE) / f"{name}.json"

    def load(self, resource: Resource) -> None:
        """Read the persisted objects of one resource (at start); the history starts after them."""
        if self.persist_root is None:
            return
        for path in sorted((self.persist_root / resource.plural).glob("*/*.json")):
            obj = read_json(path)
            if not obj:
                continue
            meta = obj["metadata"]
            self.objects[(resource.plural, meta.get("namespace", ""), meta["name"])] = obj
            self.observe_version(int(meta.get("resourceVersion") or 0))

    def observe_version(self, rv: int) -> None:
        """Continue numbering above a version seen in a stored object (a restart never reuses a version)."""
        with self.cond:
            self.rv = max(self.rv, rv)
            self.compacted = self.rv

    # ---- writes ----------------------------------------------------------------------------------
    def _record(self, kind: str, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        snapshot = copy.deepcopy(obj)
        self.events.append((self.rv, kind, plural, snapshot))
        while len(self.events) > self.history:
            self.compacted = self.events.popleft()[0]
        meta = obj["metadata"]
        path = self._file(plural, meta.get("namespace", ""), meta["name"])
        if path is not None:
            if kind == "DELETED":
                path.unlink(missing_ok=True)
            else:
                write_json(path, snapshot)
        self.cond.notify_all()
        return copy.deepcopy(snapshot)

    def create(self, resource: Resource, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        name = meta["name"]
        with self.cond:
            current = self.objects.get((resource.plural, namespace, name))
            if current is not None:
                raise errors.already_exists(resource, name, bool(current["metadata"].get("deletionTimestamp")))
            obj.setdefault("apiVersion", resource.api_version)
            obj.setdefault("kind", resource.kind)
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339(), generation=1)
            meta.pop("resourceVersion", None)
            if namespace:
                meta["namespace"] = namespace
            self.objects[(resource.plural, namespace, name)] = obj
            return self._record("ADDED", resource.plural, obj)

    def replace(self, resource: Resource, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """PUT: compare-and-set on metadata.resourceVersion when the body carries one; identity fields kept."""
        with self.cond:
            current = self.objects.get((resource.plural, namespace, name))
            if current is None:
                raise errors.not_found(resource, name)
            wanted = (body.get("metadata") or {}).get("resourceVersion")
            if wanted and wanted != current["metadata"]["resourceVersion"]:
                raise errors.conflict(resource, name)
            obj = copy.deepcopy(body)
            meta = obj.setdefault("metadata", {})
            for key in ("uid", "creationTimestamp", "namespace", "deletionTimestamp", "finalizers"):
                if key in current["metadata"]:
                    meta[key] = current["metadata"][key]
            meta["name"] = name
            changed = obj.get("spec") != current.get("spec") or obj.get("data") != current.get("data")
            meta["generation"] = current["metadata"].get("generation", 1) + (1 if changed else 0)
            obj.setdefault("apiVersion", resource.api_version)
            obj.setdefault("kind", resource.kind)
            self.objects[(resource.plural, namespace, name)] = obj
            return self._record("MODIFIED", resource.plural, obj)

    def put(self, resource: Resource, obj: dict[str, Any]) -> str:
        """A controller's write of an object it owns (no compare-and-set); stamps and returns the new version."""
        meta = obj["metadata"]
        key = (resource.plural, meta.get("namespace", ""), meta["name"])
        with self.cond:
            kind = "MODIFIED" if key in self.objects else "ADDED"
            self.objects[key] = copy.deepcopy(obj)
            self._record(kind, resource.plural, self.objects[key])
            meta["resourceVersion"] = self.objects[key]["metadata"]["resourceVersion"]
            return meta["resourceVersion"]

    def remove(self, resource: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        with self.cond:
            obj = self.objects.pop((resource.plural, namespace, name), None)
            if obj is None:
                return None
            return self._record("DELETED", resource.plural, obj)

    # ---- reads -----------------------------------------------------------------------------------
    def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        with self.cond:
            obj = self.objects.get((resource.plural, namespace, name))
            if obj is None:
                raise errors.not_found(resource, name)
            return copy.deepcopy(obj)

    def list(self, resource: Resource, namespace: str | None, label_selector: str = "",
             field_selector: str = "") -> tuple[list[dict[str, Any]], str]:
        matches = matcher(label_selector, field_selector, resource.kind)
        with self.cond:
            items = [copy.deepcopy(o) for (plural, ns, _), o in sorted(self.objects.items())
                     if plural == resource.plural and (namespace is None or ns == namespace) and matches(o)]
            return items, str(self.rv)

    def watch(self, resource: Resource, namespace: str | None, resource_version: str | None,
              label_selector: str = "", field_selector: str = "", timeout: float = 300.0,
              bookmark_every: float | None = None) -> Iterator[dict[str, Any]]:
        """Watch events ({"type", "object"}) until `timeout` seconds pass; see the module docstring."""
        matches = matcher(label_selector, field_selector, resource.kind)
        deadline = time.monotonic() + timeout

        def wanted(plural: str, obj: dict[str, Any]) -> bool:
            return plural == resource.plural and matches(obj) and (
                namespace is None or obj["metadata"].get("namespace", "") == namespace)

        with self.cond:
            if resource_version in (None, "", "0"):
                since = self.rv
                initial = [copy.deepcopy(o) for (plural, _, _), o in sorted(self.objects.items()) if wanted(plural, o)]
            else:
                since, initial = int(resource_version), []
                if since < self.compacted:
                    yield {"type": "ERROR", "object": errors.expired(since, self.rv).body()}
                    return
        for obj in initial:
            yield {"type": "ADDED", "object": obj}
        last_sent = time.monotonic()
        while True:
            with self.cond:
                pending = [(rv, kind, obj) for rv, kind, plural, obj in self.events
                           if rv > since and wanted(plural, obj)]
                if not pending:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    wait = min(left, bookmark_every) if bookmark_every else left
                    self.cond.wait(timeout=min(wait, 1.0))
                    if since < self.compacted:  # fell behind the history while waiting
                        yield {"type": "ERROR", "object": errors.expired(since, self.rv).body()}
                        return
                    current = self.rv
                else:
                    current = None
            for rv, kind, obj in pending:
                since = rv
                yield {"type": kind, "object": copy.deepcopy(obj)}
                last_sent = time.monotonic()
            if bookmark_every and current is not None and time.monotonic() - last_sent >= bookmark_every:
                since = max(since, current)
                yield {"type": "BOOKMARK", "object": {
                    "kind": resource.kind, "apiVersion": resource.api_version,
                    "metadata": {"resourceVersion": str(since)}}}
                last_sent = time.monotonic()
