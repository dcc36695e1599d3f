"""An in-memory JobSet API for tests (and the triggerer load benchmark): scriptable, deterministic, no real sleeps.

`MemoryJobSetCluster` holds the JobSets. Each created JobSet gets the next script from `plan()`: a
list of frames, each a status dict or a callable(obj) -> status dict (a callable can also write a
checkpoint, say). A frame is applied when someone reads: every sync `get` and every time an async
watch has delivered all events, the JobSet advances one frame. So a test scripts "running, one
restart, failed" and the operator, trigger or sensor plays it out as fast as it reads.

It behaves as Kubernetes and JobSet are documented to, where the provider depends on it:
- Foreground deletion (kubernetes.io/docs/concepts/architecture/garbage-collection/#foreground-deletion and
  /docs/tasks/administer-cluster/use-cascade-deletion/): DELETE returns at once; the object stays readable and
  listable with `metadata.deletionTimestamp` and the `foregroundDeletion` finalizer until its pods are gone
  (after their terminationGracePeriodSeconds), its status no longer changes, and watchers see MODIFIED, then
  DELETED. Here the grace period is `deletion_reads` reads of the object (0: gone at once, like background).
- Pods (kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/): a JobSet's pods carry
  `jobset.sigs.k8s.io/jobset-name`; one can stay Pending for ever with a container waiting reason
  (ErrImagePull, ImagePullBackOff, InvalidImageName, CreateContainerConfigError) or with PodScheduled=False,
  reason Unschedulable and the scheduler's message; neither fails the Job or the JobSet (`pod_waiting`,
  `pod_unschedulable`).
- JobSet conditions carry JobSet's own reasons and messages (kubernetes-sigs/jobset pkg/constants/constants.go,
  quoted below), never a pod's error text.
- Lock objects (a ConfigMap per run name): create is create-if-absent (409 AlreadyExists when taken), replace
  is compare-and-set on resourceVersion (409 Conflict), as the Kubernetes API does for every object.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import threading
from typing import Any, AsyncIterator, Callable, Iterable, Mapping, Sequence

from mtc_provider.adapters.protocols import AlreadyExists, ApiError, NotFound, WatchEvent
from mtc_provider.core.basics import vocabulary as V
from mtc_local.cluster.selectors import label_matcher  # the one selector matcher (the local API server's)

Frame = Mapping[str, Any] | Callable[[dict[str, Any]], Mapping[str, Any]]

# kubernetes-sigs/jobset pkg/constants/constants.go (reasons and messages of the JobSet conditions).
REACHED_MAX_RESTARTS_REASON = V.REASON_REACHED_MAX_RESTARTS
REACHED_MAX_RESTARTS_MESSAGE = "jobset failed due to reaching max number of restarts"
FAILED_JOBS_REASON = V.REASON_FAILED_JOBS
FAILED_JOBS_MESSAGE = "jobset failed due to one or more job failures"  # + " (first failed job: <job>)"
ALL_JOBS_COMPLETED_REASON = V.REASON_ALL_JOBS_COMPLETED
ALL_JOBS_COMPLETED_MESSAGE = "jobset completed successfully"
FAIL_JOBSET_ACTION_REASON = V.REASON_FAIL_JOBSET_ACTION
FAIL_JOBSET_ACTION_MESSAGE = "applying FailJobSet failure policy action"
JOBSET_NAME_LABEL = V.JOBSET_NAME_LABEL


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
        {"type": "Completed", "status": "True", "reason": ALL_JOBS_COMPLETED_REASON, "message": ALL_JOBS_COMPLETED_MESSAGE}
    ]
    return status


def status_failed(
    reason: str = REACHED_MAX_RESTARTS_REASON,
    message: str = REACHED_MAX_RESTARTS_MESSAGE,
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


def status_pending(replicated_job: str = "slice", replicas: int = 2) -> dict[str, Any]:
    """Jobs created, no pod ready yet (pods Pending: waiting for an image, a config, or capacity)."""
    return {"restarts": 0, "restartsCountTowardsMax": 0, "replicatedJobsStatus": [
        {"name": replicated_job, "ready": 0, "active": 0, "succeeded": 0, "failed": 0, "suspended": 0}]}


def _pod(jobset: str, index: int, phase: str, conditions: list[dict[str, Any]],
         container_state: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{jobset}-slice-{index}-0-x{index:04d}",
                         "labels": {JOBSET_NAME_LABEL: jobset, V.REPLICATED_JOB_NAME_ANNOTATION: "slice",
                                    V.JOB_INDEX_LABEL: str(index)}},
            "spec": {"containers": [{"name": "workload", "image": "gcr.io/p/maxtext:1"}],
                     "terminationGracePeriodSeconds": 30},
            "status": {"phase": phase, "conditions": conditions,
                       "containerStatuses": [{"name": "workload", "image": "gcr.io/p/maxtext:1", "imageID": "",
                                              "ready": phase == "Running", "restartCount": 0,
                                              "state": container_state}] if container_state else []}}


def pod_running(jobset: str, index: int = 0) -> dict[str, Any]:
    return _pod(jobset, index, "Running", [{"type": "PodScheduled", "status": "True"},
                                           {"type": "Ready", "status": "True"}],
                {"running": {"startedAt": "2026-01-01T00:00:00Z"}})


def pod_waiting(jobset: str, reason: str = "ImagePullBackOff", message: str = "", index: int = 0) -> dict[str, Any]:
    """Scheduled, container never starts: Pending with state.waiting.reason (the kubelet retries for ever)."""
    message = message or {
        "ErrImagePull": 'rpc error: code = NotFound desc = failed to pull and unpack image "gcr.io/p/maxtext:nope"',
        "ImagePullBackOff": 'Back-off pulling image "gcr.io/p/maxtext:nope"',
        "InvalidImageName": 'Failed to apply default image tag "GCR.io/P/MaxText": couldn\'t parse image name',
        "CreateContainerConfigError": 'secret "hf-token" not found',
    }.get(reason, "")
    return _pod(jobset, index, "Pending", [{"type": "PodScheduled", "status": "True"}],
                {"waiting": {"reason": reason, "message": message}})


def pod_unschedulable(jobset: str, index: int = 0,
                      message: str = "0/12 nodes are available: 12 Insufficient google.com/tpu. preemption: 0/12 "
                                     "nodes are available: 12 No preemption victims found for incoming pod.") -> dict:
    """Not scheduled (no TPU capacity): Pending, PodScheduled=False, reason Unschedulable, no container status."""
    return _pod(jobset, index, "Pending", [{"type": "PodScheduled", "status": "False", "reason": V.POD_REASON_UNSCHEDULABLE,
                                            "message": message}], {})


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
        self.delete_reasons: list[tuple[str, str]] = []  # (name, reason) of each delete asked for
        self.create_errors: list[ApiError] = []  # raised by the next create calls, in order
        self.deletion_reads = 2  # reads a foreground deletion takes (the pods' grace period); 0: at once
        self._terminating: dict[tuple[str, str], int] = {}
        self.pods: dict[tuple[str, str], list[dict[str, Any]]] = {}  # (namespace, jobset) -> its pods
        self.locks: dict[tuple[str, str], dict[str, Any]] = {}
        self.after_list: Callable[[], None] | None = None  # a hook: tests interleave two launches here

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
                raise AlreadyExists(f"{V.JOBSET.qualified_name} {metadata['name']!r} already exists")
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
                raise NotFound(f"{V.JOBSET.qualified_name} {name!r} not found")
            return copy.deepcopy(self.objects[(namespace, name)])

    def list(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        with self._lock:
            found = [
                copy.deepcopy(obj)
                for (ns, _), obj in self.objects.items()
                if ns == namespace and label_matcher(label_selector)(obj["metadata"].get("labels") or {})
            ]
        if self.after_list is not None:
            self.after_list()
        return found

    def delete(self, namespace: str, name: str, reason: str = "unspecified") -> None:
        """Foreground deletion: mark (deletionTimestamp + finalizer, MODIFIED); gone after `deletion_reads` reads."""
        with self._lock:
            key = (namespace, name)
            if key not in self.objects or key in self._terminating:
                return
            self.deleted.append(name)
            self.delete_reasons.append((name, reason))
            self._frames.pop(key, None)  # status no longer changes while terminating
            if self.deletion_reads <= 0:
                self._remove(key)
                return
            metadata = self.objects[key]["metadata"]
            metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
            metadata["deletionGracePeriodSeconds"] = 0
            metadata["finalizers"] = [*metadata.get("finalizers", []), "foregroundDeletion"]
            self._terminating[key] = self.deletion_reads
            self._record(key, "MODIFIED")

    def _remove(self, key: tuple[str, str]) -> None:
        self._record(key, "DELETED")
        del self.objects[key]
        self._terminating.pop(key, None)
        self.pods.pop(key, None)

    def _tick_deletion(self, key: tuple[str, str]) -> bool:
        """One read of a terminating JobSet: its pods get closer to gone. True when it is terminating."""
        if key not in self._terminating:
            return False
        self._terminating[key] -= 1
        if self._terminating[key] <= 0:
            self._remove(key)
        return True

    def terminating(self, namespace: str = "default") -> list[str]:
        with self._lock:
            return [name for (ns, name) in self._terminating if ns == namespace]

    # --- pods ---
    def set_pods(self, namespace: str, jobset: str, pods: list[dict[str, Any]]) -> None:
        with self._lock:
            self.pods[(namespace, jobset)] = copy.deepcopy(pods)

    def list_pods(self, namespace: str, jobset: str) -> list[dict[str, Any]]:
        """The pods set with `set_pods`; else pods consistent with the JobSet's status (one per child Job):
        running for a ready Job, Pending (scheduled, container creating) for an active one, none before that."""
        with self._lock:
            if (namespace, jobset) in self.pods:
                return copy.deepcopy(self.pods[(namespace, jobset)])
            obj = self.objects.get((namespace, jobset))
            pods, index = [], 0
            for rjob in ((obj or {}).get("status") or {}).get("replicatedJobsStatus") or []:
                ready, active = int(rjob.get("ready") or 0), int(rjob.get("active") or 0)
                for i in range(max(ready, active)):
                    pods.append(pod_running(jobset, index) if i < ready else
                                pod_waiting(jobset, "ContainerCreating", "", index))
                    index += 1
            return pods

    # --- lock objects (ConfigMap semantics) ---
    def create_lock(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        with self._lock:
            key = (namespace, body["metadata"]["name"])
            if key in self.locks:
                raise AlreadyExists(f'configmaps "{key[1]}" already exists')
            obj = copy.deepcopy(dict(body))
            obj["metadata"].update(namespace=namespace, resourceVersion=str(next(self._rv)))
            self.locks[key] = obj
            return copy.deepcopy(obj)

    def get_lock(self, namespace: str, name: str) -> dict[str, Any]:
        with self._lock:
            if (namespace, name) not in self.locks:
                raise NotFound(f'configmaps "{name}" not found')
            return copy.deepcopy(self.locks[(namespace, name)])

    def replace_lock(self, namespace: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        with self._lock:
            current = self.locks.get((namespace, name))
            if current is None:
                raise NotFound(f'configmaps "{name}" not found')
            if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                raise ApiError(409, f'Operation cannot be fulfilled on configmaps "{name}": the object has been '
                                    "modified; please apply your changes to the latest version and try again",
                               "Conflict")
            obj = copy.deepcopy(dict(body))
            obj["metadata"]["resourceVersion"] = str(next(self._rv))
            self.locks[(namespace, name)] = obj
            return copy.deepcopy(obj)

    def delete_lock(self, namespace: str, name: str) -> None:
        with self._lock:
            self.locks.pop((namespace, name), None)

    def advance(self, namespace: str, name: str) -> bool:
        """Apply the JobSet's next frame; False when there is none (or the JobSet is gone)."""
        with self._lock:
            key = (namespace, name)
            if self._tick_deletion(key):
                return True
            frames = self._frames.get(key)
            if not frames:
                return False
            frame = frames.pop(0)
            status = frame(copy.deepcopy(self.objects[key])) if callable(frame) else frame
            if key not in self.objects or key in self._terminating:  # the frame deleted it (a user, or a test)
                return True
            if dict(status) == self.objects[key].get("status"):
                return True  # a no-op update: the API server bumps no resourceVersion and sends no event
            self.objects[key]["status"] = copy.deepcopy(dict(status))
            self._record(key, "MODIFIED")
            return True

    def events_after(self, namespace: str, name: str, resource_version: str | None) -> list[WatchEvent]:
        with self._lock:
            after = int(resource_version or 0)
            return [e for e in self.events.get((namespace, name), []) if int(e.obj["metadata"]["resourceVersion"]) > after]

    def live(self, namespace: str = "default") -> list[str]:
        """JobSets that exist and are not being deleted."""
        with self._lock:
            return [name for (ns, name) in self.objects if ns == namespace and (ns, name) not in self._terminating]

    def present(self, namespace: str = "default") -> list[str]:
        """Every JobSet still readable, terminating ones included."""
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

    def delete(self, namespace: str, name: str, reason: str = "unspecified") -> None:
        self.cluster.delete(namespace, name, reason)

    def list_pods(self, namespace: str, jobset_name: str) -> list[dict[str, Any]]:
        return self.cluster.list_pods(namespace, jobset_name)

    def create_lock(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.cluster.create_lock(namespace, body)

    def get_lock(self, namespace: str, name: str) -> dict[str, Any]:
        return self.cluster.get_lock(namespace, name)

    def replace_lock(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.cluster.replace_lock(namespace, name, body)

    def delete_lock(self, namespace: str, name: str) -> None:
        self.cluster.delete_lock(namespace, name)


class AsyncMemoryJobSetApi:
    """Async side: `watch` replays events after resource_version, then advances one frame per wait."""

    def __init__(self, cluster: MemoryJobSetCluster) -> None:
        self.cluster = cluster

    async def get(self, namespace: str, name: str) -> dict[str, Any]:
        return self.cluster.get(namespace, name)

    async def list_pods(self, namespace: str, jobset_name: str) -> list[dict[str, Any]]:
        return self.cluster.list_pods(namespace, jobset_name)

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

    async def delete(self, namespace: str, name: str, reason: str = "unspecified") -> None:
        self.cluster.delete(namespace, name, reason)
