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

from mtc_provider.core.vocabulary import (
    CONDITION_COMPLETED as COMPLETED,
    CONDITION_FAILED as FAILED_CONDITION,
    CONDITION_SUSPENDED as SUSPENDED,
    POD_REASON_UNSCHEDULABLE as UNSCHEDULABLE,
    REASON_ALL_JOBS_COMPLETED,
    REASON_FAIL_JOBSET_ACTION as FAIL_JOBSET_ACTION,
    REASON_FAILED_JOBS as FAILED_JOBS,
)

PENDING = "pending"
RUNNING = "running"
RESTARTING = "restarting"
SUCCEEDED = "succeeded"
FAILED = "failed"
PHASES = (PENDING, RUNNING, RESTARTING, SUCCEEDED, FAILED)

# The JobSet rule FailJobSet fires only on failures the user declared final (our builder: the
# podFailurePolicy's "bug" exit codes), so resubmitting cannot help.
NON_RETRYABLE_REASONS = frozenset({FAIL_JOBSET_ACTION})
# Failures no restart can fix; they surface in condition messages (and in the local runner's reasons).
IMAGE_ERROR_RE = re.compile(r"ImagePullBackOff|ErrImagePull|InvalidImageName|ErrImageNeverPull")
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
    return {
        c.get("type", ""): c
        for c in status.get("conditions") or []
        if str(c.get("status", "")).lower() == "true"
    }


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
    common = {
        "name": name,
        "namespace": metadata.get("namespace", ""),
        "restarts": int(status.get("restarts") or 0),
        "restarts_count_towards_max": int(status.get("restartsCountTowardsMax") or 0),
        "resource_version": str(metadata.get("resourceVersion", "")),
        "terminating": bool(metadata.get("deletionTimestamp")),
    }
    failed_rjobs = [r.get("name", "") for r in replicated_status if int(r.get("failed") or 0) > 0]

    if FAILED_CONDITION in conditions or terminal == FAILED_CONDITION:
        condition = conditions.get(FAILED_CONDITION, {})
        reason = condition.get("reason", "") or FAILED_JOBS
        message = condition.get("message", "")
        match = FIRST_FAILED_JOB_RE.search(message)
        failed_job = match.group("job") if match else ""
        failed_rjob = _replicated_job_of(failed_job, name, replicated_names) if failed_job else ""
        image_error = bool(IMAGE_ERROR_RE.search(f"{reason} {message}"))
        return JobSetState(
            phase=FAILED,
            failed_job=failed_job,
            failed_replicated_job=failed_rjob or (failed_rjobs[0] if failed_rjobs else ""),
            reason=reason,
            message=message,
            retryable=reason not in NON_RETRYABLE_REASONS and not image_error,
            **common,
        )
    if COMPLETED in conditions or terminal == COMPLETED:
        condition = conditions.get(COMPLETED, {})
        return JobSetState(
            phase=SUCCEEDED, reason=condition.get("reason", REASON_ALL_JOBS_COMPLETED), message=condition.get("message", ""),
            **common,
        )
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
# Waiting reasons of a container that will never start by itself: the pod stays Pending for ever, its Job and
# JobSet never fail (kubernetes.io "Pod Lifecycle": container states; "Images": ImagePullBackOff).
PERMANENT_WAITING_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName",
                                       "CreateContainerConfigError", "ErrImageNeverPull", "CreateContainerError"})


@dataclass(frozen=True)
class PodsState:
    """What the attempt's pods say about starting: how many are scheduled, and why the others are not."""

    total: int
    scheduled: int
    running: int
    permanent_error: str = ""  # "<pod>: <reason>: <message>" of a pod that can never start
    unschedulable_message: str = ""  # the scheduler's message (PodScheduled=False, reason Unschedulable)

    @property
    def all_started(self) -> bool:
        return self.total > 0 and self.running == self.total

    def capacity_line(self) -> str:
        return (f"waiting for capacity: {self.scheduled} of {self.total} pods scheduled: "
                f"{self.unschedulable_message or 'no scheduler message yet'}")


def evaluate_pods(pods: list[Mapping[str, Any]]) -> PodsState:
    """Read a JobSet's pods (plain dicts, `kubectl get pods -o json` items): permanent errors and scheduling."""
    scheduled = running = 0
    permanent = unschedulable = ""
    for pod in pods:
        name = (pod.get("metadata") or {}).get("name", "")
        status = pod.get("status") or {}
        phase = status.get("phase", "Pending")
        if phase in ("Running", "Succeeded"):
            running += 1
        conditions = {c.get("type"): c for c in status.get("conditions") or []}
        sched = conditions.get("PodScheduled")
        if sched and str(sched.get("status")).lower() == "true" or phase in ("Running", "Succeeded", "Failed"):
            scheduled += 1
        elif sched and sched.get("reason") == UNSCHEDULABLE and not unschedulable:
            unschedulable = sched.get("message", "")
        for container in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in PERMANENT_WAITING_REASONS and not permanent:
                permanent = f"pod {name} container {container.get('name', '')}: {waiting['reason']}: " \
                            f"{waiting.get('message', '')}".rstrip(": ")
    return PodsState(len(pods), scheduled, running, permanent, unschedulable)
