"""The watched JobSet as the run view sees it now, read inside the api-server (I/O only).

While the launch task is deferred, its trigger row (Airflow's `trigger` table: the trigger's kwargs, non-secret by
design) names the JobSet it watches and the cluster connection (`connection`, `namespace`, `name`: triggers/jobset.py).
The run view reads, at the page's pace and not the trigger's 300 s progress interval, what the trigger itself reads:
the pods of that JobSet (pending ones say what the attempt waits for: `PodScheduled=False` reason `Unschedulable`
for capacity, a container `waiting` with `ErrImagePull`/`ImagePullBackOff` for an image pull; Kubernetes "Pod
Lifecycle" and "Images"), and the leader pod's log tail with `timestamps=true`, whose `completed step` lines
(core.measure.step_log, as MaxText prints them) give the step and, with the kubelet's timestamps, the rate; the head of
its log names the checkpoint it restored (core.measure.step_log.parse_restore_line).

Bounded: one pod list and one log read of at most TAIL_LINES lines / TAIL_BYTES bytes per JobSet every
CACHE_SECONDS, however many pages poll; a failure is reported as a sentence, never an error page.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Mapping

CACHE_SECONDS = 2.0
TAIL_LINES = 200
TAIL_BYTES = 65_536
REQUEST_TIMEOUT = 10.0  # a page refresh must not hang on a slow cluster
# Only this trigger's rows are read as a JobSet watch: the classpath its serialize() writes (another class's row,
# whatever it is named, holds kwargs of another meaning).
TRIGGER_CLASSPATH = "mtc_provider.triggers.jobset.JobSetTrigger"

HEAD_BYTES = 262_144  # MaxText prints its config before it restores
_cache: dict[str, tuple[float, dict[str, Any]]] = {}
_heads: dict[str, list[dict[str, Any]]] = {}  # leader pod -> the restores its log's head names
_lock = threading.Lock()


def watched_jobset(session: Any, ti: Any) -> dict[str, Any] | None:
    """{connection, namespace, name, labels} of the JobSet the launch task's trigger watches; None when not
    deferred, or when the task's trigger is not the provider's JobSetTrigger.

    `labels`: the run labels (core.basics.labels.run_labels) the launch operator puts on the JobSet and its pods
    for this task instance; only pods that carry all of them are read, so a trigger row naming another run's
    JobSet (another DAG's, through a row task code wrote) shows nothing of it.
    """
    from airflow.models.trigger import Trigger

    from mtc_provider.core.basics import labels as L

    if getattr(ti, "trigger_id", None) is None:
        return None
    row = session.get(Trigger, ti.trigger_id)
    if row is None or str(row.classpath) != TRIGGER_CLASSPATH:
        return None
    kwargs = row.kwargs
    if not isinstance(kwargs, Mapping) or not isinstance(kwargs.get("connection"), Mapping) \
            or not isinstance(kwargs.get("name"), str) or not kwargs["name"]:
        return None
    own = {key: value for key, value in L.run_labels(ti.dag_id, ti.run_id, ti.task_id, "").items()
           if key != L.RUN_NAME}  # the run name comes from the run's description: the task's identity binds
    return {"connection": dict(kwargs["connection"]), "namespace": kwargs.get("namespace") or "default",
            "name": kwargs["name"], "labels": own}


def read_cluster(watch: Mapping[str, Any], clock=time.monotonic) -> dict[str, Any]:
    """{jobset, pods: [{name, phase, leader, waiting, message}], log_steps: [(unix s, step)], error} (cached)."""
    key = json.dumps(watch, sort_keys=True, default=str)
    now = clock()
    with _lock:
        hit = _cache.get(key)
        if hit is not None and now - hit[0] < CACHE_SECONDS:
            return hit[1]
    try:
        value = _read(watch)
    except Exception as exc:  # noqa: BLE001 - the page says what failed and shows the rest
        value = {"jobset": watch.get("name"), "pods": [], "log_steps": [], "restores": [],
                 "error": f"could not read JobSet {watch.get('namespace')}/{watch.get('name')} "
                          f"({type(exc).__name__}: {str(exc)[:200]})"}
    with _lock:
        for old in [k for k, (at, _) in _cache.items() if now - at > 60]:
            _cache.pop(old, None)
        _cache[key] = (now, value)
    return value


def _read(watch: Mapping[str, Any]) -> dict[str, Any]:
    from kubernetes import client as k8s

    from mtc_provider.adapters.kubernetes import KubernetesJobSetApi
    from mtc_provider.core.basics.labels import JOBSET_NAME_LABEL, selector
    from mtc_provider.targets import jobset_api

    api = jobset_api(watch["connection"], request_timeout=REQUEST_TIMEOUT)  # an adapter: no hook (the glue ring)
    if not isinstance(api, KubernetesJobSetApi):
        raise RuntimeError("this cluster connection has no pod endpoints")
    namespace, name = watch["namespace"], watch["name"]
    api_client = api.client_factory()  # a fresh client, so a fresh token (GKE)
    try:
        core = k8s.CoreV1Api(api_client)
        found = core.list_namespaced_pod(namespace, label_selector=selector({JOBSET_NAME_LABEL: name,
                                                                             **watch["labels"]}),
                                         _request_timeout=REQUEST_TIMEOUT)
        pods = sorted((_pod(p) for p in found.items), key=lambda p: (not p["leader"], p["name"]))
        leader = next((p for p in pods if p["leader"] and p["phase"] != "Pending"), None)
        steps: list[tuple[float, int]] = []
        if leader is not None:
            text = _log_text(core, namespace, leader["name"], tail_lines=TAIL_LINES, limit_bytes=TAIL_BYTES)
            steps = timestamped_steps(text)
            restores = _head_restores(core, namespace, leader["name"])
    finally:
        api_client.close()
    return {"jobset": name, "pods": pods, "log_steps": steps, "restores": restores if leader else [], "error": None}


def _log_text(core: Any, namespace: str, pod: str, **bounds: Any) -> str:
    """A pod's log with the kubelet's timestamps, as text (raw bytes: the client's preload would parse it)."""
    response = core.read_namespaced_pod_log(pod, namespace, timestamps=True, _preload_content=False,
                                            _request_timeout=REQUEST_TIMEOUT, **bounds)
    try:
        return response.data.decode("utf-8", "replace")
    finally:
        response.release_conn()


def _head_restores(core: Any, namespace: str, pod: str) -> list[dict[str, Any]]:
    """The restores the leader logged at its start: the log's first HEAD_BYTES (no tailLines: `limitBytes` reads
    from the start), read once per pod; the tail is gone past them after a few hundred steps."""
    with _lock:
        if pod in _heads:
            return _heads[pod]
    text = _log_text(core, namespace, pod, limit_bytes=HEAD_BYTES)
    found = timestamped_restores(text)
    with _lock:
        if len(_heads) > 256:
            _heads.clear()
        if found or len(text.encode()) >= HEAD_BYTES:  # a head that may still grow is read again next time
            _heads[pod] = found
    return found


def _pod(pod: Any) -> dict[str, Any]:
    from mtc_provider.core.basics.labels import COMPLETION_INDEX_LABEL, JOB_INDEX_LABEL

    labels = pod.metadata.labels or {}
    status = pod.status
    waiting, message = "", ""
    for condition in (status.conditions or []) if status else []:
        if condition.type == "PodScheduled" and condition.status == "False":
            waiting, message = condition.reason or "Unschedulable", condition.message or ""
    for container in (status.container_statuses or []) if status else []:
        state = container.state.waiting if container.state else None
        if state is not None and state.reason:
            waiting, message = state.reason, state.message or ""
    return {"name": pod.metadata.name, "phase": (status.phase if status else None) or "Pending",
            "leader": labels.get(JOB_INDEX_LABEL) == "0" and labels.get(COMPLETION_INDEX_LABEL) == "0",
            "waiting": waiting, "message": message}


def _stamped(text: str, parse: Any) -> list[tuple[float, Any]]:
    """(time, what `parse` found) for each line of a log read with timestamps=true that it recognises."""
    from mtc_provider.core.measure.step_log import log_timestamp

    out = []
    for line in text.splitlines():
        stamp, _, message = line.partition(" ")
        found = parse(message)
        at = log_timestamp(stamp) if found is not None else None
        if found is not None and at is not None:
            out.append((at, found))
    return out


def timestamped_steps(text: str) -> list[tuple[float, int]]:
    """(time, step) of each `completed step` line of a log read with timestamps=true."""
    from mtc_provider.core.measure.step_log import parse_step_line

    return [(at, parsed.step) for at, parsed in _stamped(text, parse_step_line)]


def timestamped_restores(text: str) -> list[dict[str, Any]]:
    """{at, step} of each restore MaxText logged (`restoring from this run's directory step N`: core.measure.step_log)."""
    from mtc_provider.core.measure.step_log import parse_restore_line

    return [{"at": at, "step": step} for at, step in _stamped(text, parse_restore_line)]
