"""An in-memory JobSet API for tests: scriptable, deterministic, no real sleeps.

`MemoryJobSetCluster` holds the JobSets. Each created JobSet gets the next script from `plan()`: a
list of frames, each a status dict or a callable(obj) -> status dict (a callable can also write a
checkpoint, say). A frame is applied when someone reads: every sync `get` and every time an async
watch has delivered all events, the JobSet advances one frame. So a test scripts "running, one
restart, failed" and the operator, trigger or sensor plays it out as fast as it reads.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import threading
from typing import Any, AsyncIterator, Callable, Iterable, Mapping, Sequence

from mtc_provider.adapters.protocols import AlreadyExists, ApiError, NotFound, WatchEvent

Frame = Mapping[str, Any] | Callable[[dict[str, Any]], Mapping[str, Any]]


def status_running(replicated_job: str = "slice", replicas: int = 2, restarts: int = 0) -> dict[str, Any]:
    return {
        "restarts": restarts,
        "restartsCountTowardsMax": restarts,
        "replicatedJobsStatus": [
            {"name": replicated_job, "ready": replicas, "active": replicas, "succeeded": 0, "failed": 0, "suspended": 0}
        ],
    }


def status_restarting(replicated_job: str = "slice", replicas: int = 2, restarts: int = 1) -> dict[str, Any]:
    status = status_running(replicated_job, replicas, restarts)
    status["replicatedJobsStatus"][0].update(ready=replicas - 1, active=replicas - 1, failed=1)
    return status


def status_completed(replicated_job: str = "slice", replicas: int = 2, restarts: int = 0) -> dict[str, Any]:
    status = status_running(replicated_job, replicas, restarts)
    status["replicatedJobsStatus"][0].update(ready=0, active=0, succeeded=replicas)
    status["terminalState"] = "Completed"
    status["conditions"] = [
        {"type": "Completed", "status": "True", "reason": "AllJobsCompleted", "message": "jobset completed successfully"}
    ]
    return status


def status_failed(
    reason: str = "ReachedMaxRestarts",
    message: str = "jobset failed due to reaching max number of restarts",
    failed_job: str = "",
    replicated_job: str = "slice",
    replicas: int = 2,
    restarts: int = 0,
) -> dict[str, Any]:
    status = status_running(replicated_job, replicas, restarts)
    status["replicatedJobsStatus"][0].update(ready=0, active=0, failed=1)
    status["terminalState"] = "Failed"
    if failed_job:
        message = f"{message} (first failed job: {failed_job})"
    status["conditions"] = [{"type": "Failed", "status": "True", "reason": reason, "message": message}]
    return status


def _matches(labels: Mapping[str, str], selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


class MemoryJobSetCluster:
    """The shared state behind MemoryJobSetApi and AsyncMemoryJobSetApi."""

    def __init__(self, scripts: Iterable[Sequence[Frame]] = ()) -> None:
        self._lock = threading.RLock()
        self._scripts: list[list[Frame]] = [list(s) for s in scripts]
        self._rv = itertools.count(1)
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self._frames: dict[tuple[str, str], list[Frame]] = {}
        self.events: dict[tuple[str, str], list[WatchEvent]] = {}
        self.created: list[str] = []
        self.deleted: list[str] = []
        self.create_errors: list[ApiError] = []  # raised by the next create calls, in order

    def plan(self, *scripts: Sequence[Frame]) -> "MemoryJobSetCluster":
        """Append scripts; the n-th created JobSet plays the n-th script (default: running, completed)."""
        with self._lock:
            self._scripts.extend(list(s) for s in scripts)
        return self

    def _record(self, key: tuple[str, str], kind: str) -> WatchEvent:
        obj = self.objects[key]
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        event = WatchEvent(kind, copy.deepcopy(obj))
        self.events.setdefault(key, []).append(event)
        return event

    def create(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        with self._lock:
            if self.create_errors:
                raise self.create_errors.pop(0)
            obj = copy.deepcopy(dict(body))
            metadata = obj.setdefault("metadata", {})
            metadata["namespace"] = namespace
            key = (namespace, metadata["name"])
            if key in self.objects:
                raise AlreadyExists(f"jobsets.jobset.x-k8s.io {metadata['name']!r} already exists")
            metadata["uid"] = f"uid-{len(self.created) + 1}"
            obj["status"] = {}
            self.objects[key] = obj
            script = self._scripts.pop(0) if self._scripts else [status_running(), status_completed()]
            self._frames[key] = list(script)
            self.created.append(metadata["name"])
            self._record(key, "ADDED")
            return copy.deepcopy(obj)

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        with self._lock:
            if (namespace, name) not in self.objects:
                raise NotFound(f"jobsets.jobset.x-k8s.io {name!r} not found")
            return copy.deepcopy(self.objects[(namespace, name)])

    def list(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        with self._lock:
            return [
                copy.deepcopy(obj)
                for (ns, _), obj in self.objects.items()
                if ns == namespace and _matches(obj["metadata"].get("labels") or {}, label_selector)
            ]

    def delete(self, namespace: str, name: str) -> None:
        with self._lock:
            key = (namespace, name)
            if key not in self.objects:
                return
            self._record(key, "DELETED")
            del self.objects[key]
            self._frames.pop(key, None)
            self.deleted.append(name)

    def advance(self, namespace: str, name: str) -> bool:
        """Apply the JobSet's next frame; False when there is none (or the JobSet is gone)."""
        with self._lock:
            key = (namespace, name)
            frames = self._frames.get(key)
            if not frames:
                return False
            frame = frames.pop(0)
            status = frame(copy.deepcopy(self.objects[key])) if callable(frame) else frame
            if key not in self.objects:  # the frame deleted it (a user, or a test, removing the JobSet)
                return True
            self.objects[key]["status"] = copy.deepcopy(dict(status))
            self._record(key, "MODIFIED")
            return True

    def events_after(self, namespace: str, name: str, resource_version: str | None) -> list[WatchEvent]:
        with self._lock:
            after = int(resource_version or 0)
            return [e for e in self.events.get((namespace, name), []) if int(e.obj["metadata"]["resourceVersion"]) > after]

    def live(self, namespace: str = "default") -> list[str]:
        with self._lock:
            return [name for (ns, name) in self.objects if ns == namespace]


class MemoryJobSetApi:
    """Sync JobSetApi over a MemoryJobSetCluster; each `get` advances the JobSet one frame first."""

    def __init__(self, cluster: MemoryJobSetCluster) -> None:
        self.cluster = cluster

    def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.cluster.create(namespace, body)

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        self.cluster.advance(namespace, name)
        return self.cluster.get(namespace, name)

    def list(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        return self.cluster.list(namespace, label_selector)

    def delete(self, namespace: str, name: str) -> None:
        self.cluster.delete(namespace, name)


class AsyncMemoryJobSetApi:
    """Async side: `watch` replays events after resource_version, then advances one frame per wait."""

    def __init__(self, cluster: MemoryJobSetCluster) -> None:
        self.cluster = cluster

    async def get(self, namespace: str, name: str) -> dict[str, Any]:
        return self.cluster.get(namespace, name)

    async def watch(
        self, namespace: str, name: str, resource_version: str | None = None
    ) -> AsyncIterator[WatchEvent]:
        if resource_version is None:
            # Like a fresh list+watch: start from the object's current state.
            obj = self.cluster.get(namespace, name)
            yield WatchEvent("ADDED", obj)
            resource_version = obj["metadata"]["resourceVersion"]
        while True:
            pending = self.cluster.events_after(namespace, name, resource_version)
            for event in pending:
                yield event
                resource_version = event.obj["metadata"]["resourceVersion"]
                if event.type == "DELETED":
                    return
            if not pending and not self.cluster.advance(namespace, name):
                return  # nothing left to happen: the watch ends like a server-side timeout
            await asyncio.sleep(0)

    async def delete(self, namespace: str, name: str) -> None:
        self.cluster.delete(namespace, name)
