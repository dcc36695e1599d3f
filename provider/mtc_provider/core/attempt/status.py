"""The one JobSet status evaluator: a JobSet dict (Kubernetes JSON shape) -> a typed JobSetState.

Condition types and reason strings are JobSet's own (sigs.k8s.io/jobset pkg/constants, v0.10+): a
`Failed` condition carries `ReachedMaxRestarts`, `FailedJobs` or `FailJobSetFailurePolicyAction` and a
message ending in "(first failed job: <job name>)". Both targets report this shape, so the trigger,
the sensor and the synchronous path all read status through this function only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from mtc_provider.core.basics.vocabulary import (
    CONDITION_COMPLETED as COMPLETED,
    CONDITION_FAILED as FAILED_CONDITION,
    CONDITION_SUSPENDED as SUSPENDED,
    POD_REASON_UNSCHEDULABLE as UNSCHEDULABLE,
    RESTART_ATTEMPT_LABEL,  # JobSet's label on every pod of one (re)start
    REASON_ALL_JOBS_COMPLETED,
    REASON_FAIL_JOBSET_ACTION as FAIL_JOBSET_ACTION,
    REASON_FAILED_JOBS as FAILED_JOBS,
)

PENDING = "pending"
RUNNING = "running"
RESTARTING = "restarting"
SUCCEEDED = "succeeded"
FAILED = "failed"

# The JobSet rule FailJobSet fires only on failures the user declared final (our builder: the
# podFailurePolicy's "bug" exit codes), so resubmitting cannot help.
NON_RETRYABLE_REASONS = frozenset({FAIL_JOBSET_ACTION})
# An image error no resubmission can fix, should a Failed condition's message name one: only a malformed reference.
# Pull errors (ErrImagePull, ImagePullBackOff, ErrImageNeverPull) heal when the registry or the tag comes back:
# Kubernetes retries pulls with back-off (kubernetes.io "Images": ImagePullBackOff), so a Failed JobSet that names
# one is retried like any other failure (the trigger bounds a pull that never heals by image_pull_timeout).
IMAGE_ERROR_RE = re.compile(r"InvalidImageName")
FIRST_FAILED_JOB_RE = re.compile(r"\(first failed job: (?P<job>[^)\s]+)\)")


@dataclass(frozen=True)
class JobSetState:
    """What a JobSet is doing now, as the glue needs it."""

    name: str
    namespace: str
    phase: str
    restarts: int = 0
    restarts_count_towards_max: int = 0
    failed_job: str = ""
    failed_replicated_job: str = ""
    reason: str = ""
    message: str = ""
    retryable: bool = True
    resource_version: str = ""
    # metadata.deletionTimestamp is set: a foreground deletion is under way. Its status does not change any
    # more, so a terminating JobSet is never live, whatever its phase says.
    terminating: bool = False

    @property
    def ended(self) -> bool:
        return self.phase in (SUCCEEDED, FAILED)

    @property
    def live(self) -> bool:
        return not self.ended and not self.terminating

    def describe(self) -> str:
        parts = [f"JobSet {self.namespace}/{self.name} {self.phase}" + (" (terminating)" if self.terminating else ""),
                 f"restarts={self.restarts}"]
        if self.failed_replicated_job:
            parts.append(f"failed replicated job={self.failed_replicated_job}")
        if self.reason:
            parts.append(f"reason={self.reason}")
        if self.message:
            parts.append(f"message={self.message}")
        return ", ".join(parts)


def _true_conditions(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c.get("type", ""): c for c in status.get("conditions") or [] if str(c.get("status", "")).lower() == "true"}


def _replicated_job_of(job_name: str, jobset_name: str, replicated_jobs: list[str]) -> str:
    """Child Jobs are named <jobset>-<replicatedJob>-<index>; recover the replicatedJob name."""
    stem = job_name[len(jobset_name) + 1:] if job_name.startswith(jobset_name + "-") else job_name
    for name in sorted(replicated_jobs, key=len, reverse=True):
        if stem == name or stem.startswith(name + "-"):
            return name
    return stem.rsplit("-", 1)[0] if "-" in stem else stem


def evaluate_jobset(obj: Mapping[str, Any]) -> JobSetState:
    """Read a JobSet's phase, restarts, failed replicated job and retryability from its status."""
    metadata = obj.get("metadata") or {}
    status = obj.get("status") or {}
    name = metadata.get("name", "")
    replicated_status = status.get("replicatedJobsStatus") or []
    replicated_names = [r.get("name", "") for r in (obj.get("spec") or {}).get("replicatedJobs") or []]
    replicated_names += [r.get("name", "") for r in replicated_status]
    conditions = _true_conditions(status)
    terminal = status.get("terminalState", "")
    common = {"name": name, "namespace": metadata.get("namespace", ""), "restarts": int(status.get("restarts") or 0),
              "restarts_count_towards_max": int(status.get("restartsCountTowardsMax") or 0),
              "resource_version": str(metadata.get("resourceVersion", "")),
              "terminating": bool(metadata.get("deletionTimestamp"))}
    failed_rjobs = [r.get("name", "") for r in replicated_status if int(r.get("failed") or 0) > 0]

    if FAILED_CONDITION in conditions or terminal == FAILED_CONDITION:
        condition = conditions.get(FAILED_CONDITION, {})
        reason = condition.get("reason", "") or FAILED_JOBS
        message = condition.get("message", "")
        match = FIRST_FAILED_JOB_RE.search(message)
        failed_job = match.group("job") if match else ""
        failed_rjob = _replicated_job_of(failed_job, name, replicated_names) if failed_job else ""
        image_error = bool(IMAGE_ERROR_RE.search(f"{reason} {message}"))
        return JobSetState(phase=FAILED, failed_job=failed_job,
                           failed_replicated_job=failed_rjob or (failed_rjobs[0] if failed_rjobs else ""),
                           reason=reason, message=message,
                           retryable=reason not in NON_RETRYABLE_REASONS and not image_error, **common)
    if COMPLETED in conditions or terminal == COMPLETED:
        condition = conditions.get(COMPLETED, {})
        return JobSetState(phase=SUCCEEDED, reason=condition.get("reason", REASON_ALL_JOBS_COMPLETED),
                           message=condition.get("message", ""), **common)
    if SUSPENDED in conditions:
        condition = conditions[SUSPENDED]
        return JobSetState(phase=PENDING, reason=condition.get("reason", "SuspendedJobs"),
                           message=condition.get("message", ""), **common)
    if failed_rjobs:
        # A child Job failed and no terminal state is set: the controller is recreating all Jobs.
        return JobSetState(phase=RESTARTING, failed_replicated_job=failed_rjobs[0], reason="Restarting", **common)
    if any(int(r.get("active") or 0) + int(r.get("ready") or 0) + int(r.get("succeeded") or 0) > 0
           for r in replicated_status):
        return JobSetState(phase=RUNNING, **common)
    return JobSetState(phase=PENDING, **common)


# --- pods -------------------------------------------------------------------------------------------------
# A container's waiting reason (kubernetes.io "Pod Lifecycle": container states) says whether it can start by itself.
# Kubernetes keeps retrying image pulls with back-off (kubernetes.io "Images": ImagePullBackOff), and the kubelet
# retries container creation on every pod sync, so these may heal (a registry outage, a replacement node still
# pulling a large image, a runtime hiccup): waited for, bounded by the trigger's image_pull_timeout.
HEALING_WAITING_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "CreateContainerError",
                                     "CreateContainerConfigError"})
# What cannot heal by itself: a malformed image reference (kubelet pkg/kubelet/images: ErrInvalidImageName)...
PERMANENT_WAITING_REASONS = frozenset({"InvalidImageName"})
# ...and a Secret or ConfigMap (or one of its keys) named in the pod spec that does not exist. The kubelet reports
# CreateContainerConfigError with the error text as the message (kubernetes/kubernetes
# pkg/kubelet/kuberuntime/kuberuntime_container.go: startContainer returns `s.Message(), ErrCreateContainerConfig`);
# its secret and configmap managers answer apierrors.NewNotFound(corev1.Resource("secret"|"configmap"), name)
# (pkg/kubelet/secret/secret_manager.go, pkg/kubelet/configmap/configmap_manager.go), i.e. `secret "x" not found`,
# and makeEnvironmentVariables (pkg/kubelet/kubelet_pods.go) `couldn't find key K in Secret ns/x`.
MISSING_REFERENCE_RE = re.compile(
    r'\b(secret|configmap) "[^"]+" not found|couldn\'t find key \S+ in (Secret|ConfigMap) ', re.IGNORECASE)


def never_heals(reason: str, message: str) -> bool:
    """A waiting reason (and the kubelet's message) that no retry of the kubelet can fix."""
    if reason in PERMANENT_WAITING_REASONS:
        return True
    return reason == "CreateContainerConfigError" and bool(MISSING_REFERENCE_RE.search(message or ""))


@dataclass(frozen=True)
class PodsState:
    """What the pods of the JobSet's current (re)start say about starting: how many are scheduled and running,
    and what the others wait for."""

    total: int
    scheduled: int
    running: int
    permanent_error: str = ""  # "pod <p> container <c>: <reason>: <message>" of a pod that can never start
    unschedulable_message: str = ""  # the scheduler's message (PodScheduled=False, reason Unschedulable)
    healing_error: str = ""  # the first pull / create error the kubelet keeps retrying (same shape)
    waiting: str = ""  # what the first pod that is not running waits for (a reason, terminating, its phase)
    restart_attempt: int | None = None  # the JobSet restart these pods belong to (their restart-attempt label)

    @property
    def all_started(self) -> bool:
        return self.total > 0 and self.running == self.total

    def capacity_line(self) -> str:
        return (f"waiting for capacity: {self.scheduled} of {self.total} pods scheduled: "
                f"{self.unschedulable_message or 'no scheduler message yet'}")

    def waiting_line(self) -> str:
        """What is really waiting: capacity while pods are unscheduled, else the pods' own state."""
        if self.total == 0:
            return "no pods yet (the JobSet's Jobs have not created them)"
        if self.scheduled < self.total:
            return self.capacity_line()
        return (f"{self.scheduled} of {self.total} pods scheduled, {self.running} running; "
                f"waiting for {self.healing_error or self.waiting or 'the pods to start'}")


def _attempt(pod: Mapping[str, Any]) -> int | None:
    value = ((pod.get("metadata") or {}).get("labels") or {}).get(RESTART_ATTEMPT_LABEL)
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def evaluate_pods(pods: list[Mapping[str, Any]]) -> PodsState:
    """Read a JobSet's pods (plain dicts, `kubectl get pods -o json` items): permanent and healing errors, scheduling.

    Only the pods of the newest restart attempt count: after an in-cluster restart the previous pods may still be
    terminating. A terminating pod is not running, whatever its phase.
    """
    attempts = [a for a in (_attempt(p) for p in pods) if a is not None]
    newest = max(attempts) if attempts else None
    current = [p for p in pods if newest is None or _attempt(p) in (None, newest)]
    scheduled = running = 0
    permanent = unschedulable = healing = waiting = ""
    for pod in current:
        metadata = pod.get("metadata") or {}
        name = metadata.get("name", "")
        status = pod.get("status") or {}
        phase = status.get("phase", "Pending")
        terminating = bool(metadata.get("deletionTimestamp"))
        if phase in ("Running", "Succeeded") and not terminating:
            running += 1
        elif not waiting:
            waiting = f"pod {name} terminating" if terminating else f"pod {name} {phase}"
        conditions = {c.get("type"): c for c in status.get("conditions") or []}
        sched = conditions.get("PodScheduled")
        if sched and str(sched.get("status")).lower() == "true" or phase in ("Running", "Succeeded", "Failed"):
            scheduled += 1
        elif sched and sched.get("reason") == UNSCHEDULABLE and not unschedulable:
            unschedulable = sched.get("message", "")
        for container in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
            state = (container.get("state") or {}).get("waiting") or {}
            reason, message = state.get("reason", ""), state.get("message", "")
            if not reason:
                continue
            line = f"pod {name} container {container.get('name', '')}: {reason}: {message}".rstrip(": ")
            if never_heals(reason, message):
                permanent = permanent or line
            elif reason in HEALING_WAITING_REASONS:
                healing = healing or line
            if waiting == f"pod {name} {phase}":
                waiting = line
    return PodsState(len(current), scheduled, running, permanent, unschedulable, healing, waiting, newest)
