"""The runner's processes as Pod objects, and their logs as the kubelet serves them.

Pod fields follow https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/ (phase Pending / Running /
Succeeded / Failed; container state waiting / running / terminated with exitCode and reason -- `Completed` for 0,
`Error` otherwise, `StartError` when the command could not start; deletionTimestamp while a deleted pod
terminates) and the labels JobSet and the Job controller put on pods
(https://jobset.sigs.k8s.io/docs/reference/labels-annotations-and-environment-variables/,
https://kubernetes.io/docs/reference/labels-annotations-taints/#batch-kubernetes-io-job-completion-index).
A pod held by a start fault of the fault plan is Pending without a process, as Kubernetes shows it: `image_pull`
-- container waiting ErrImagePull, then ImagePullBackOff, with the kubelet's message
(https://kubernetes.io/docs/concepts/containers/images/#imagepullbackoff); `unschedulable` -- condition
PodScheduled=False, reason Unschedulable, the scheduler's "0/N nodes are available: ..." message, no node and no
container statuses (https://kubernetes.io/docs/concepts/scheduling-eviction/kube-scheduler/); `mount_failure` --
scheduled on its node, container waiting ContainerCreating while the kubelet cannot mount the MTC CSI ramdisk, and a
Warning event `FailedMount` (source kubelet, the node) whose count grows as the kubelet retries with its back-off
(0.5 s doubling to 2m2s) (https://kubernetes.io/docs/tasks/debug/debug-application/debug-pods/: "My pod stays
pending"/"waiting", and `kubectl describe pod` shows the events;
https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/event-v1/).
Logs: GET .../pods/{name}/log with tailLines, limitBytes, sinceSeconds, timestamps, follow
(https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/#read-log-of-the-specified-pod);
timestamps are the kubelet's fixed-width RFC 3339 with nanoseconds, here the time the runner read the line.
"""

from __future__ import annotations

import copy
import time
import uuid
from typing import Any, Iterator

from mtc_local.runner.pods import COMMAND_NOT_FOUND, Pod

JOB_API = "batch/v1"


def rfc3339(ts: float | None) -> str | None:
    return None if ts is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def rfc3339_nano(ts: float) -> str:
    seconds = int(ts)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int((ts - seconds) * 1e9):09d}Z"


def _template(jobset: dict[str, Any], replicated_job: str) -> dict[str, Any]:
    for rj in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        if rj.get("name") == replicated_job:
            return ((rj.get("template") or {}).get("spec") or {}).get("template") or {}
    return {}


# The kubelet's first pull fails with ErrImagePull; it then backs off (ImagePullBackOff) before trying again.
FIRST_PULL_SECONDS = 2.0
UNSCHEDULABLE_MESSAGE = ("0/1 nodes are available: 1 Insufficient google.com/tpu. preemption: 0/1 nodes are "
                         "available: 1 No preemption victims found for incoming pod.")


def _image_pull_waiting(image: str, since_created: float) -> dict[str, Any]:
    if since_created < FIRST_PULL_SECONDS:
        return {"reason": "ErrImagePull",
                "message": f'failed to pull and unpack image "{image}": failed to resolve reference "{image}": '
                           f'{image}: not found'}
    return {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'}


NODE_NAME = "localhost"
CSI_DRIVER = "multitier-checkpoint.csi.storage.gke.io"
# What the kubelet says when a CSI driver named in a pod is not registered on its node (kubernetes
# pkg/volume/csi: "driver name ... not found in the list of registered CSI drivers"), as for MTC's driver on a node
# no CheckpointConfiguration selects.
MOUNT_FAILURE_MESSAGE = ('MountVolume.SetUp failed for volume "{volume}" : kubernetes.io/csi: mounter.SetUpAt failed '
                         'to get CSI client: driver name ' + CSI_DRIVER + ' not found in the list of registered CSI '
                         'drivers')
RETRY_INITIAL_S, RETRY_MAX_S = 0.5, 122.0  # the kubelet's volume retry back-off (goroutinemap/exponentialbackoff)


def mount_retries(elapsed: float) -> int:
    """How many mounts the kubelet has tried `elapsed` seconds after the first (its back-off between tries)."""
    tries, waited, delay = 1, 0.0, RETRY_INITIAL_S
    while waited + delay <= elapsed:
        waited, tries, delay = waited + delay, tries + 1, min(delay * 2, RETRY_MAX_S)
    return tries


def pod_events(pod_obj: dict[str, Any], pod: Pod) -> list[dict[str, Any]]:
    """The Events the kubelet records about this pod now: a FailedMount warning while a mount_failure holds it."""
    if pod.held != "mount_failure":
        return []
    meta = pod_obj["metadata"]
    volumes = [v.get("name", "") for v in (pod_obj.get("spec") or {}).get("volumes") or []
               if (v.get("csi") or {}).get("driver") == CSI_DRIVER]
    count = mount_retries(time.time() - pod.created)
    last = pod.created + sum(min(RETRY_INITIAL_S * 2**i, RETRY_MAX_S) for i in range(count - 1))
    return [{
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{int(pod.created * 1e6):x}", "namespace": meta["namespace"],
                     "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{meta['uid']}/FailedMount"))},
        "involvedObject": {"kind": "Pod", "namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"],
                           "apiVersion": "v1"},
        "reason": "FailedMount", "type": "Warning",
        "message": MOUNT_FAILURE_MESSAGE.format(volume=volumes[0] if volumes else "ramdisk"),
        "source": {"component": "kubelet", "host": NODE_NAME},
        "firstTimestamp": rfc3339(pod.created), "lastTimestamp": rfc3339(last), "count": count,
        "reportingComponent": "kubelet", "reportingInstance": NODE_NAME,
    }]


def _container_state(pod: Pod, image: str = "") -> tuple[str, dict[str, Any], bool]:
    """(phase, container state, ready)."""
    if pod.held == "mount_failure":  # scheduled, its volumes not mounted: the container is never created
        return "Pending", {"waiting": {"reason": "ContainerCreating"}}, False
    if pod.held == "image_pull":
        return "Pending", {"waiting": _image_pull_waiting(image, time.time() - pod.created)}, False
    if pod.exit_code is not None:
        if pod.proc is None:
            reason = "StartError"
        else:
            reason = "Completed" if pod.exit_code == 0 else "Error"
        terminated = {"exitCode": pod.exit_code, "reason": reason, "startedAt": rfc3339(pod.started),
                      "finishedAt": rfc3339(pod.finished)}
        if pod.exit_code > 128 and pod.exit_code != COMMAND_NOT_FOUND:
            terminated["signal"] = pod.exit_code - 128
        return ("Succeeded" if pod.exit_code == 0 else "Failed"), {"terminated": terminated}, False
    if pod.proc is None:
        return "Pending", {"waiting": {"reason": "ContainerCreating"}}, False
    return "Running", {"running": {"startedAt": rfc3339(pod.started)}}, True


def pod_object(jobset: dict[str, Any], pod: Pod) -> dict[str, Any]:
    """The Pod a JobSet's Job would have made for this process (without resourceVersion: the store sets it)."""
    meta = jobset["metadata"]
    template = copy.deepcopy(_template(jobset, pod.rj.name))
    job_name = f"{meta['name']}-{pod.rj.name}-{pod.job_index}"
    jobset_labels = {
        "jobset.sigs.k8s.io/jobset-name": meta["name"],
        "jobset.sigs.k8s.io/replicatedjob-name": pod.rj.name,
        "jobset.sigs.k8s.io/job-index": str(pod.job_index),
        "jobset.sigs.k8s.io/restart-attempt": str(pod.restart),
        "jobset.sigs.k8s.io/jobset-uid": meta.get("uid", ""),
        "batch.kubernetes.io/job-completion-index": str(pod.spec.host),
        "batch.kubernetes.io/job-name": job_name,
        "job-name": job_name,
    }
    template_meta = template.get("metadata") or {}
    labels = {**(template_meta.get("labels") or {}), **jobset_labels}
    annotations = {**(template_meta.get("annotations") or {}),
                   **{k: v for k, v in jobset_labels.items() if k.startswith("jobset.sigs.k8s.io/")},
                   "batch.kubernetes.io/job-completion-index": str(pod.spec.host)}
    spec = template.get("spec") or {}
    unscheduled = pod.held == "unschedulable"
    spec.update(hostname=pod.spec.name, subdomain=meta["name"], **({} if unscheduled else {"nodeName": NODE_NAME}))
    spec.setdefault("restartPolicy", "Never")
    spec.setdefault("terminationGracePeriodSeconds", int(pod.rj.grace_seconds))
    containers = spec.get("containers") or [{"name": pod.rj.container_name}]
    phase, state, ready = _container_state(pod, containers[0].get("image", ""))
    statuses = [{"name": c.get("name", pod.rj.container_name), "image": c.get("image", ""), "ready": ready,
                 "imageID": "", "restartCount": 0, "started": ready, "state": state} for c in containers[:1]]
    conditions = [{"type": kind, "status": "True" if ok else "False", "lastTransitionTime": rfc3339(pod.created)}
                  for kind, ok in (("PodScheduled", True), ("Initialized", True), ("ContainersReady", ready),
                                   ("Ready", ready))]
    if unscheduled:  # the scheduler's verdict only: no node, no IP, no container statuses
        conditions = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                       "message": UNSCHEDULABLE_MESSAGE, "lastTransitionTime": rfc3339(pod.created)}]
    owner_uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{meta.get('uid', '')}/{job_name}"))
    metadata: dict[str, Any] = {
        "name": pod.object_name, "namespace": meta["namespace"],
        "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{owner_uid}/{pod.object_name}")),
        "creationTimestamp": rfc3339(pod.created), "labels": labels, "annotations": annotations,
        "generateName": f"{pod.spec.name}-",
        "ownerReferences": [{"apiVersion": JOB_API, "kind": "Job", "name": job_name, "uid": owner_uid,
                             "controller": True, "blockOwnerDeletion": True}],
    }
    if pod.deletion_timestamp:
        metadata["deletionTimestamp"] = pod.deletion_timestamp
        grace = pod.rj.grace_seconds if pod.deletion_grace is None else pod.deletion_grace
        metadata["deletionGracePeriodSeconds"] = int(grace)
    status: dict[str, Any] = {"phase": phase, "conditions": conditions, "hostIP": "127.0.0.1",
                              "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}],
                              "startTime": rfc3339(pod.created), "containerStatuses": statuses, "qosClass": "BestEffort"}
    if unscheduled:
        status = {"phase": "Pending", "conditions": conditions, "qosClass": "BestEffort"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


# ---- logs --------------------------------------------------------------------------------------------
def _lines(data: bytes, start: int, times: list[tuple[int, float]], fallback: float) -> list[tuple[float, bytes]]:
    """Split complete and trailing lines from `data` (read at offset `start`), each with its arrival time."""
    out, offset, chunk = [], start, 0
    for line in data.splitlines(keepends=True):
        end = offset + len(line)
        while chunk < len(times) and times[chunk][0] < end:
            chunk += 1
        out.append((times[chunk][1] if chunk < len(times) else fallback, line))
        offset = end
    return out


def read_log(pod: Pod, tail_lines: int | None = None, limit_bytes: int | None = None,
             since_seconds: float | None = None, timestamps: bool = False) -> tuple[bytes, int]:
    """The log as the kubelet would answer it now, and the file offset read up to (where `follow` continues)."""
    try:
        data = pod.log_path.read_bytes()
    except FileNotFoundError:
        return b"", 0
    lines = _lines(data, 0, list(pod.log_times), time.time())
    if since_seconds is not None:
        oldest = time.time() - since_seconds
        lines = [(t, line) for t, line in lines if t >= oldest]
    if tail_lines is not None:
        lines = lines[-tail_lines:] if tail_lines > 0 else []
    text = b"".join((rfc3339_nano(t).encode() + b" " if timestamps else b"") + line for t, line in lines)
    if limit_bytes is not None:
        text = text[:limit_bytes]
    return text, len(data)


def follow_log(pod: Pod, offset: int, timestamps: bool, stop: Any, poll: float = 0.2) -> Iterator[bytes]:
    """New log bytes from `offset` until the pod is no longer running (and its log is drained) or `stop()`."""
    while not stop():
        try:
            with open(pod.log_path, "rb") as log:
                log.seek(offset)
                data = log.read()
        except FileNotFoundError:
            data = b""
        end = data.rfind(b"\n") + 1 if pod.alive else len(data)
        if end:
            chunk = data[:end]
            if timestamps:
                chunk = b"".join(rfc3339_nano(t).encode() + b" " + line
                                 for t, line in _lines(chunk, offset, list(pod.log_times), time.time()))
            offset += end
            yield chunk
        elif not pod.alive:
            return
        time.sleep(poll)
