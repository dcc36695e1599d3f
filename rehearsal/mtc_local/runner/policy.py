"""JobSet's failure handling, as the controllers do it, over plain values (pure).

Pod exit -> Job outcome follows the Job controller (podFailurePolicy, then backoffLimit); Job failure ->
JobSet action follows kubernetes-sigs/jobset `executeFailurePolicy`; reason strings are JobSet's constants.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from mtc_local.runner.manifest import JobSetPlan, ReplicatedJob

# batch/v1 Job failure reasons
JOB_REASON_POD_FAILURE_POLICY = "PodFailurePolicy"
JOB_REASON_BACKOFF_LIMIT = "BackoffLimitExceeded"
DISRUPTION_TARGET = "DisruptionTarget"  # k8s.io/api core/v1: the condition of a pod Kubernetes disrupts
BACKOFF_LIMIT_MESSAGE = "Job has reached the specified backoff limit"  # the Job controller's message
# kubernetes-sigs/jobset pkg/constants
ALL_JOBS_COMPLETED = ("AllJobsCompleted", "jobset completed successfully")
FAILED_JOBS = ("FailedJobs", "jobset failed due to one or more job failures")
REACHED_MAX_RESTARTS = ("ReachedMaxRestarts", "jobset failed due to reaching max number of restarts")
FAIL_JOBSET_ACTION = ("FailJobSetFailurePolicyAction", "applying FailJobSet failure policy action")
COMPLETED, FAILED = "Completed", "Failed"


def exit_code(returncode: int) -> int:
    """A container's exit code as Kubernetes reports it: a signal N becomes 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def pod_failure(rj: ReplicatedJob, code: int | None, failed_so_far: int,
                conditions: tuple[str, ...] = ()) -> tuple[str, str]:
    """What a failed pod (exit code != 0) does to its Job: ("fail", job failure reason), or ("recreate", "Ignore")
    for a replacement that does not count, or ("recreate", "Count") for one that counts toward backoffLimit.

    `failed_so_far` counts earlier failed pods of this Job (toward backoffLimit). `code` is None for a pod that
    failed without a container exit (deleted while Pending): no onExitCodes rule matches it. `conditions`: the
    pod's condition types (DisruptionTarget when it was disrupted), for onPodConditions rules.
    """
    return job_failure(rj, code, failed_so_far, conditions)[:2]


def job_failure(rj: ReplicatedJob, code: int | None, failed_so_far: int, conditions: tuple[str, ...] = (),
                pod: str = "", container: str = "") -> tuple[str, str, str]:
    """`pod_failure` with the Job's failure message, as the Job controller writes it (kubernetes/kubernetes
    pkg/controller/job/pod_failure_policy.go, matchPodFailurePolicy; kubernetes.io "Handling retriable and
    non-retriable pod failures with Pod failure policy"): the first matching rule wins and is named by its index:
    "Pod NS/NAME has condition DisruptionTarget matching FailJob rule at index 0", "Container C for pod NS/NAME
    failed with exit code N matching FailJob rule at index 1". JobSet's onJobFailureMessagePatterns read it."""
    for rule in rj.pod_rules:
        if rule.matches(rj.container_name, code, conditions):
            if rule.action == "FailJob":
                if rule.conditions:
                    kind = next(k for k in rule.conditions if k in conditions)
                    message = f"Pod {pod} has condition {kind} matching FailJob rule at index {rule.index}"
                else:
                    message = (f"Container {container or rj.container_name} for pod {pod} failed with exit code "
                               f"{code} matching FailJob rule at index {rule.index}")
                return "fail", JOB_REASON_POD_FAILURE_POLICY, message
            if rule.action == "Ignore":
                return "recreate", "Ignore", ""
            break  # Count / FailIndex: count toward backoffLimit
    if failed_so_far + 1 > rj.backoff_limit:
        return "fail", JOB_REASON_BACKOFF_LIMIT, BACKOFF_LIMIT_MESSAGE
    return "recreate", "Count", ""


@dataclass(frozen=True)
class Decision:
    """What the JobSet does about its failed Jobs: fail (reason, message) or restart (counted or not)."""

    action: str  # "fail" | "restart"
    reason: str = ""
    message: str = ""
    counts_toward_max: bool = True


def _matches(rule: Any, rj_name: str, reason: str, message: str) -> bool:
    """A rule must match the Job's failure reason and its message (JobSet CRD `failurePolicy.rules`: "The rule must
    match both the job failure reason and the job failure message"; an empty list matches any; patterns are RE2,
    searched in the message as Go's regexp.MatchString does)."""
    return ((not rule.on_job_failure_reasons or reason in rule.on_job_failure_reasons)
            and (not rule.on_job_failure_message_patterns
                 or any(re.search(p, message) for p in rule.on_job_failure_message_patterns))
            and (not rule.target_replicated_jobs or rj_name in rule.target_replicated_jobs))


def jobset_failure(plan: JobSetPlan, failed_jobs: list[tuple[str, ...]], restarts_toward_max: int) -> Decision:
    """Apply spec.failurePolicy to failed Jobs given as (job name, replicatedJob name, job failure reason[, job
    failure message]), earliest failure first."""
    failed_jobs = [(*entry, "")[:4] for entry in failed_jobs]
    first_job = failed_jobs[0][0]

    def msg(base: str, job: str) -> str:
        return f"{base} (first failed job: {job})"

    if not plan.has_failure_policy:
        return Decision("fail", FAILED_JOBS[0], msg(FAILED_JOBS[1], first_job))
    action, job = "RestartJobSet", first_job
    for rule in plan.rules:
        match = next((name for name, rj_name, reason, message in failed_jobs
                      if _matches(rule, rj_name, reason, message)), None)
        if match is not None:
            action, job = rule.action, match
            break
    if action == "FailJobSet":
        return Decision("fail", FAIL_JOBSET_ACTION[0], msg(FAIL_JOBSET_ACTION[1], job))
    if action == "RestartJobSetAndIgnoreMaxRestarts":
        return Decision("restart", counts_toward_max=False)
    if restarts_toward_max >= plan.max_restarts:
        return Decision("fail", REACHED_MAX_RESTARTS[0], msg(REACHED_MAX_RESTARTS[1], job))
    return Decision("restart")


def condition(kind: str, reason: str, message: str, now: float | None = None) -> dict[str, Any]:
    """A metav1.Condition as JobSet writes it."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if now is None else now))
    return {"type": kind, "status": "True", "reason": reason, "message": message, "lastTransitionTime": stamp}
