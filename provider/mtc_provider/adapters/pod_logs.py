"""Pod logs of a JobSet (I/O only): the leader pod's log followed in bounded polls, and failed pods' tails.

Kubernetes: pods are found by the label JobSet puts on each of them (`jobset.sigs.k8s.io/jobset-name`); the leader
is job index 0, completion index 0. Logs come from the pod log endpoint with `tailLines` / `limitBytes` (bounded
on the server) and `timestamps=true`, so a follower polls with `sinceSeconds` and drops lines it has already seen.
The local target's cluster serves the same endpoints (its kubelet timestamps each line as it reads it).
Formatting (what a failed pod's section looks like, how much is kept) is the core's (`core.measure.progress_report`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from mtc_provider.core.basics.labels import COMPLETION_INDEX_LABEL, JOB_INDEX_LABEL, JOBSET_NAME_LABEL
from mtc_provider.core.measure.progress_report import DEFAULT_TAIL_BYTES, DEFAULT_TAIL_LINES, failed_pod_section, tail


@dataclass(frozen=True)
class PodInfo:
    name: str
    phase: str  # Pending, Running, Succeeded, Failed (Kubernetes pod phases)
    exit_code: int | None
    reason: str
    leader: bool

    @property
    def failed(self) -> bool:
        return self.phase == "Failed" or (self.exit_code is not None and self.exit_code != 0)


class PodLogs(Protocol):
    def pods(self, namespace: str, jobset_name: str) -> list[PodInfo]: ...

    def read(self, namespace: str, pod: str, tail_lines: int = DEFAULT_TAIL_LINES,
             limit_bytes: int = DEFAULT_TAIL_BYTES, since_seconds: int | None = None,
             timestamps: bool = False) -> str: ...


def _pod_info(pod: Any) -> PodInfo:
    labels = pod.metadata.labels or {}
    exit_code, reason = None, ""
    for status in (pod.status.container_statuses or []) if pod.status else []:
        terminated = status.state.terminated if status.state else None
        if terminated is not None and (exit_code is None or terminated.exit_code):
            exit_code, reason = terminated.exit_code, terminated.reason or ""
    leader = labels.get(JOB_INDEX_LABEL) == "0" and labels.get(COMPLETION_INDEX_LABEL) == "0"
    reason = f"exit {exit_code}, {reason}" if exit_code is not None and reason else (
        f"exit {exit_code}" if exit_code is not None else (pod.status.reason or "") if pod.status else "")
    return PodInfo(pod.metadata.name, (pod.status.phase if pod.status else "") or "", exit_code, reason, leader)


class KubernetesPodLogs:
    """Through the core/v1 API; `client_factory()` returns a kubernetes ApiClient (a fresh token per call)."""

    def __init__(self, client_factory: Callable[[], Any], container: str | None = None) -> None:
        self.client_factory = client_factory
        self.container = container

    def _core(self, call: Callable[[Any], Any]) -> Any:
        from kubernetes import client as k8s

        api_client = self.client_factory()
        try:
            return call(k8s.CoreV1Api(api_client))
        finally:
            api_client.close()

    def pods(self, namespace: str, jobset_name: str) -> list[PodInfo]:
        found = self._core(lambda core: core.list_namespaced_pod(
            namespace, label_selector=f"{JOBSET_NAME_LABEL}={jobset_name}"))
        return sorted((_pod_info(p) for p in found.items), key=lambda p: (not p.leader, p.name))

    def read(self, namespace: str, pod: str, tail_lines: int = DEFAULT_TAIL_LINES,
             limit_bytes: int = DEFAULT_TAIL_BYTES, since_seconds: int | None = None, timestamps: bool = False) -> str:
        kwargs: dict[str, Any] = {"tail_lines": tail_lines, "limit_bytes": limit_bytes, "timestamps": timestamps}
        if since_seconds is not None:
            kwargs["since_seconds"] = since_seconds
        if self.container:
            kwargs["container"] = self.container
        def read(core: Any) -> str:
            # Raw bytes, decoded here: kubernetes 32+ deserializes a text/plain body as str(bytes) ("b'...'").
            response = core.read_namespaced_pod_log(pod, namespace, _preload_content=False, **kwargs)
            try:
                return response.data.decode("utf-8", "replace")
            finally:
                response.release_conn()

        return self._core(read)


def pod_logs_for(api: Any, container: str | None = None) -> PodLogs | None:
    """The log reader that goes with a JobSetApi from `targets.jobset_api`; None when the api has no pods (a double)."""
    from mtc_provider.adapters.kubernetes import KubernetesJobSetApi

    if isinstance(api, KubernetesJobSetApi):  # GKE, any Kubernetes cluster, the local cluster
        return KubernetesPodLogs(api.client_factory, container)
    return None


def failed_pod_tails(logs: PodLogs, namespace: str, jobset_name: str, lines: int = DEFAULT_TAIL_LINES,
                     max_pods: int = 4) -> list[str]:
    """Task-log lines with the tail of each failed pod's log (at most `max_pods` pods, leader first)."""
    out: list[str] = []
    failed = [pod for pod in logs.pods(namespace, jobset_name) if pod.failed]
    for pod in failed[:max_pods]:
        text = tail(logs.read(namespace, pod.name, tail_lines=lines), lines)
        out += failed_pod_section(pod.name, pod.reason, text)
    if len(failed) > max_pods:
        out.append(f"... and {len(failed) - max_pods} more failed pods")
    return out


def log_failed_pod_tails(log: logging.Logger, api: Any, namespace: str, jobset_name: str,
                         container: str | None = None) -> list[str]:
    """Write the failed pods' tails to `log`; best effort: reading logs never changes a task's outcome."""
    try:
        logs = pod_logs_for(api, container)
        lines = failed_pod_tails(logs, namespace, jobset_name) if logs else []
    except Exception as exc:  # a pod already garbage-collected, RBAC without pods/log, ...
        log.warning("could not read the failed pods' logs of JobSet %s/%s: %s", namespace, jobset_name, exc)
        return []
    for line in lines:
        log.info("%s", line)
    return lines


class LeaderLogFollower:
    """Follow the leader pod's log in bounded polls: each `poll()` returns only lines not returned before.

    Kubernetes: `sinceSeconds` covers the time since the previous poll (plus a margin) with timestamps on, and
    lines at or before the last timestamp seen are dropped (the local cluster serves the same timestamps).
    """

    def __init__(self, logs: PodLogs, namespace: str, jobset_name: str, max_lines: int = DEFAULT_TAIL_LINES,
                 clock: Callable[[], float] | None = None) -> None:
        import time

        self.logs, self.namespace, self.jobset_name, self.max_lines = logs, namespace, jobset_name, max_lines
        self.clock = clock or time.time
        self.pod: str | None = None
        self.last_timestamp = ""
        self.last_poll: float | None = None
        self._at_last: list[str] = []

    def poll(self) -> list[str]:
        return [message for _, message in self.poll_stamped()]

    def poll_stamped(self) -> list[tuple[str, str]]:
        """The new lines with their RFC 3339 timestamps (when each was written: the stall clock's time of a step)."""
        if self.pod is None:
            leaders = [p for p in self.logs.pods(self.namespace, self.jobset_name) if p.leader]
            if not leaders:
                return []
            self.pod = leaders[0].name
        now = self.clock()
        since = None if self.last_poll is None else int(now - self.last_poll) + 5
        text = self.logs.read(self.namespace, self.pod, tail_lines=self.max_lines, since_seconds=since, timestamps=True)
        self.last_poll = now
        fresh = []
        already = list(self._at_last)  # lines returned before with the newest timestamp seen
        for line in text.splitlines():
            stamp, _, message = line.partition(" ")
            if stamp < self.last_timestamp:  # RFC 3339 UTC timestamps compare as strings
                continue
            if stamp == self.last_timestamp and message in already:
                already.remove(message)
                continue
            if stamp > self.last_timestamp:
                self.last_timestamp, self._at_last = stamp, []
            self._at_last.append(message)
            fresh.append((stamp, message))
        return fresh[-self.max_lines:]
