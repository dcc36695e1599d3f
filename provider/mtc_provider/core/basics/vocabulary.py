"""The words both sides of a boundary must spell the same: one definition each, imported by every side.

The provider renders and reads JobSets and CheckpointConfigurations; a cluster (GKE or the local target) acts on
them; the training process reads what the cluster hands it. Each of these words is a contract with something
outside this package (JobSet's controller, the MTC CSI driver, Kubernetes' downward API, the local runner and
workload), so it lives here once instead of as equal literals in several modules.
"""

from __future__ import annotations

from dataclasses import dataclass


# --- resource identities ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Resource:
    """A Kubernetes API resource: what the client libraries' custom-object calls and the API paths need."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version  # "" is the core group: "v1"

    @property
    def qualified_name(self) -> str:
        """`<plural>.<group>` (`pods` in the core group), as in RBAC rules and the API server's error messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def group_kind(self) -> str:
        """`JobSet.jobset.x-k8s.io`, `ConfigMap`: how the API server's 422 messages name a kind."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def served_key(self) -> str:
        """`<plural>.<group>/<version>`: how a readiness report names a resource the cluster must serve."""
        return f"{self.qualified_name}/{self.version}"


# https://github.com/kubernetes-sigs/jobset (api/jobset/v1alpha2)
JOBSET = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", namespaced=True)
# https://cloud.google.com/kubernetes-engine/docs/how-to/machine-learning/training/multi-tier-checkpointing
CHECKPOINT_CONFIGURATION = Resource("checkpointing.gke.io", "v1", "checkpointconfigurations",
                                    "CheckpointConfiguration", namespaced=False)

# --- JobSet conditions (kubernetes-sigs/jobset pkg/constants, v0.10+) ------------------------------------
CONDITION_COMPLETED = "Completed"
CONDITION_FAILED = "Failed"
CONDITION_SUSPENDED = "Suspended"
REASON_ALL_JOBS_COMPLETED = "AllJobsCompleted"
REASON_FAILED_JOBS = "FailedJobs"
REASON_REACHED_MAX_RESTARTS = "ReachedMaxRestarts"
REASON_FAIL_JOBSET_ACTION = "FailJobSetFailurePolicyAction"
# batch/v1 Job failure reasons a JobSet failurePolicy rule can match (onJobFailureReasons).
JOB_REASON_POD_FAILURE_POLICY = "PodFailurePolicy"
JOB_REASON_BACKOFF_LIMIT = "BackoffLimitExceeded"
# The pod condition reason of a pod no node can take (kubernetes.io "Pod Lifecycle").
POD_REASON_UNSCHEDULABLE = "Unschedulable"

# --- the MTC CSI driver and its ramdisk ---------------------------------------------------------------------
MTC_CSI_DRIVER = "multitier-checkpoint.csi.storage.gke.io"
# The driver writes it at the ramdisk's root: line 1 the process id, line 2 the JAX coordinator `host:port`.
INIT_INFO_FILENAME = "jax-init-info.txt"

# --- labels and annotations JobSet's controller puts on its Jobs and pods ------------------------------------
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_NAME_ANNOTATION = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"

# --- the provider's own labels (the reattach key of a run's JobSets) ----------------------------------------
LABEL_PREFIX = "mtc.airflow.apache.org"
DAG_ID_LABEL = f"{LABEL_PREFIX}/dag-id"
RUN_ID_LABEL = f"{LABEL_PREFIX}/run-id"
TASK_ID_LABEL = f"{LABEL_PREFIX}/task-id"
TRY_NUMBER_LABEL = f"{LABEL_PREFIX}/try-number"  # the Airflow try that submitted the attempt
# The attempt's own number (names its JobSet `-a<attempt>`): one try submits several attempts when each interrupted
# attempt made progress (core.attempt.resubmission.resubmit_in_try), so it is not the try number. Absent on older JobSets:
# then the try number is the attempt number (they were equal).
ATTEMPT_LABEL = f"{LABEL_PREFIX}/attempt"
RUN_NAME_LABEL = f"{LABEL_PREFIX}/run-name"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "airflow-provider-mtc"
# An attempt's JobSet's annotation: the newest finalized step at the start of each attempt so far (JSON list).
STEP_HISTORY_ANNOTATION = f"{LABEL_PREFIX}/step-history"

# --- why a JobSet is deleted (design: only an attempt's end, the teardown or a user's confirmed action) --------
# Sent with every delete (header DELETE_REASON_HEADER, the asking process in DELETE_CALLER_HEADER), so the
# cluster's audit (the local target's deletes.jsonl; on GKE the audit log's request headers) says who asked and why.
DELETE_REASON_HEADER = "X-Mtc-Delete-Reason"
DELETE_CALLER_HEADER = "X-Mtc-Caller"
DELETE_ATTEMPT_ENDED = "attempt-ended"  # an ended attempt's JobSet, freed before the next attempt is submitted
DELETE_ATTEMPT_FAILED = "attempt-failed"  # the operator ends an attempt: unstartable, start-up timeout, stalled
DELETE_USER_KILL = "user-kill"  # a user marked the task failed or cleared it
DELETE_TEARDOWN = "teardown"  # the run is over
DELETE_USER_REQUEST = "user-request"  # a person asked for it: `mtc delete RUN` (the OS user is in the caller header)
DELETE_UNSPECIFIED = "unspecified"
DELETE_LOCK_RELEASED = "lock-released"  # the run lock (a ConfigMap), freed when the run ended for good
DELETE_REASONS: tuple[str, ...] = (DELETE_ATTEMPT_ENDED, DELETE_ATTEMPT_FAILED, DELETE_USER_KILL, DELETE_TEARDOWN,
                                   DELETE_USER_REQUEST, DELETE_UNSPECIFIED)

# --- env of a training container -------------------------------------------------------------------------
# From the downward API (JobSet's labels and annotations above; Kubernetes sets JOB_COMPLETION_INDEX itself).
ENV_JOBSET_NAME = "JOBSET_NAME"
ENV_REPLICATED_JOB_NAME = "REPLICATED_JOB_NAME"
ENV_JOB_INDEX = "JOB_INDEX"
ENV_JOBSET_RESTART_ATTEMPT = "JOBSET_RESTART_ATTEMPT"
ENV_JOB_COMPLETION_INDEX = "JOB_COMPLETION_INDEX"
DOWNWARD_API_ENV: tuple[tuple[str, str], ...] = (
    (ENV_JOBSET_NAME, JOBSET_NAME_LABEL),
    (ENV_REPLICATED_JOB_NAME, REPLICATED_JOB_NAME_ANNOTATION),
    (ENV_JOB_INDEX, JOB_INDEX_LABEL),
    (ENV_JOBSET_RESTART_ATTEMPT, RESTART_ATTEMPT_LABEL),
)
# The local target's job shape and identity fallback (the workload reads jax-init-info.txt first).
ENV_NUM_SLICES = "MTC_NUM_SLICES"
ENV_HOSTS_PER_SLICE = "MTC_HOSTS_PER_SLICE"
ENV_PROCESS_ID = "MTC_PROCESS_ID"
ENV_COORDINATOR_ADDRESS = "MTC_COORDINATOR_ADDRESS"


# Seconds between JobSet status checks on gke and kubernetes, where a JobSet changes over minutes and every poll is an
# API call: the one default of the launch operator, the JobSet sensor, the trigger and the watch (the local
# target's 2 s is in the local kind's rules, mtc_local.target.rules).
DEFAULT_POLL_INTERVAL_S = 30.0
