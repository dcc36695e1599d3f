"""The JobSet manifest for a multi-slice TPU training run with the MTC ramdisk mounted.

Shape follows xpk's rendered MTC JobSet and GKE's example: one replicatedJob with one replica per slice,
one pod per host, and the exit-code convention that separates "retry" from "bug":
exit 42 and 127..255 (signals, OOM kill, preemption) are retryable and restart the whole JobSet up to
maxRestarts; any other non-zero exit is a bug, fails the Job through its podFailurePolicy, and a JobSet
rule turns that into FailJobSet at once instead of burning restarts. A disrupted pod (preemption, maintenance,
node loss: the DisruptionTarget condition) fails its Job through the podFailurePolicy too, and a JobSet rule
restarts every slice without counting against maxRestarts (docs/resubmission.md, layer 1).
The dict is built in a fixed key order so `yaml.safe_dump(sort_keys=False)` is byte-stable (golden tests).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from mtc_provider.core.definition.render.customization import CustomizationSpec, apply_customization
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.basics.labels import MANAGED_BY, MANAGED_BY_VALUE, PREFIX as LABEL_PREFIX, RUN_NAME
from mtc_provider.core.definition.render.maxtext import container_command
from mtc_provider.core.basics.names import DNS1123_LABEL_MAX, LABEL_VALUE_RE, label_value
from mtc_provider.core.definition.description.spec import CheckpointingSpec, RunConfig, WorkloadSpec
from mtc_provider.core.definition.shape.tpu import SliceSpec
from mtc_provider.core.basics.vocabulary import DOWNWARD_API_ENV, JOB_REASON_POD_FAILURE_POLICY, JOBSET, MTC_CSI_DRIVER

API_VERSION = JOBSET.api_version
KIND = JOBSET.kind
PLURAL = JOBSET.plural

MTC_VOLUME_NAME = "mtc-ramdisk"
EXCLUSIVE_TOPOLOGY_ANNOTATION = "alpha.jobset.sigs.k8s.io/exclusive-topology"
NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
TPU_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TPU_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
TPU_RESOURCE = "google.com/tpu"

# xpk's convention: 42 (a workload asking to be retried) and 128+N (killed by signal N) and 127 are retryable.
RETRYABLE_EXIT_CODES: tuple[int, ...] = (42, *range(127, 256))
# Every other non-zero exit code means a bug: do not retry. (0 is success, not a failure.)
DONT_RETRY_EXIT_CODES: tuple[int, ...] = tuple(code for code in range(1, 256) if code not in RETRYABLE_EXIT_CODES)
# JobSet's webhook requires rule names matching ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$ (no '-').
FAIL_ON_BUG_RULE = "FailOnBugExitCode"
RESTART_ON_DISRUPTION_RULE = "RestartOnDisruption"
# The pod condition Kubernetes adds to a pod it is about to disrupt (k8s.io/api core/v1 `DisruptionTarget`).
DISRUPTION_TARGET = "DisruptionTarget"
# The Job controller's failure message for a FailJob rule matched on a pod condition:
# fmt.Sprintf("Pod %s/%s has condition %v matching %v rule at index %d", ...) (pkg/controller/job/
# pod_failure_policy.go, matchPodFailurePolicy). An RE2 pattern (JobSet matches it with Go's regexp).
DISRUPTION_MESSAGE_PATTERN = "has condition DisruptionTarget matching FailJob rule"
POD_FAILURE_POLICY_REASON = JOB_REASON_POD_FAILURE_POLICY
RESTART_STRATEGY = "Recreate"

# Env the training process reads to know where it runs; JobSet puts these values on every pod
# as annotations, Kubernetes sets JOB_COMPLETION_INDEX itself for Indexed Jobs.
FIELD_REF_ENV: tuple[tuple[str, str], ...] = DOWNWARD_API_ENV
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LABEL_KEY_RE = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def pod_failure_policy(container_name: str) -> dict[str, Any]:
    """Fail the Job (not the pod's retry) when a pod was disrupted, or when the container exits with a code that
    means a bug. The Job controller takes the first matching rule and names it in the Job's failure message
    (kubernetes/kubernetes pkg/controller/job/pod_failure_policy.go): the JobSet rules below tell the two apart by
    that message.

    Rule 0, a disruption: the pod has the `DisruptionTarget` condition (kubernetes.io "Pod disruption conditions":
    preemption by the scheduler, taint-manager deletion after a node loss, API eviction, pod GC of a lost node,
    kubelet termination for node shutdown or node-pressure) -> "Pod NS/NAME has condition DisruptionTarget matching
    FailJob rule at index 0". First, because a disrupted pod's exit code (SIGTERM, SIGKILL after the grace period)
    is never the workload's bug. `status: "True"` is spelled out: JobSet v0.10.1's CRD requires it.
    Rule 1, a bug: an exit code outside xpk's retryable set -> "Container C for pod ... failed with exit code N
    matching FailJob rule at index 1". Needs `restartPolicy: Never` (the pod spec's, Kubernetes' requirement for a
    podFailurePolicy).
    """
    return {
        "rules": [
            {"action": "FailJob", "onPodConditions": [{"type": DISRUPTION_TARGET, "status": "True"}]},
            {
                "action": "FailJob",
                "onExitCodes": {"containerName": container_name, "operator": "NotIn",
                                "values": list(RETRYABLE_EXIT_CODES)},
            },
        ]
    }


def failure_policy(max_restarts: int) -> dict[str, Any]:
    """Restart all slices up to max_restarts; a disruption restarts them without counting; a bug fails at once.

    Rules are taken in order, the first match wins, and a rule must match both the Job's failure reason and its
    message (JobSet CRD `failurePolicy.rules`, v0.10.1 and v0.12.0; JobSet docs "Failure Policy", the example
    `host-maintenance-event-model`: RestartJobSetAndIgnoreMaxRestarts on PodFailurePolicy for maintenance
    evictions). Both pod failure policy rules fail the Job with reason PodFailurePolicy, so the disruption rule also
    matches the Job controller's message for a pod condition; the bug rule takes every other PodFailurePolicy
    failure. No rule matches BackoffLimitExceeded (a retryable exit code): RestartJobSet, counted.
    xpk v1.13's rendered MTC JobSet has only the bug rule (FailJobSet on PodFailurePolicy, `onPodConditions: []`),
    so there a disruption uses up maxRestarts like a crash.
    """
    return {
        "maxRestarts": max_restarts,
        "restartStrategy": RESTART_STRATEGY,
        "rules": [
            {"name": RESTART_ON_DISRUPTION_RULE, "action": "RestartJobSetAndIgnoreMaxRestarts",
             "onJobFailureReasons": [POD_FAILURE_POLICY_REASON],
             "onJobFailureMessagePatterns": [DISRUPTION_MESSAGE_PATTERN]},
            {"name": FAIL_ON_BUG_RULE, "action": "FailJobSet", "onJobFailureReasons": [POD_FAILURE_POLICY_REASON]},
        ],
    }


def check_labels(labels: Mapping[str, str] | None) -> dict[str, str]:
    checked: dict[str, str] = {}
    for key, value in (labels or {}).items():
        if not isinstance(key, str) or not LABEL_KEY_RE.match(key) or len(key.rpartition("/")[2]) > DNS1123_LABEL_MAX:
            raise SpecError(f"labels.{key}", key, "a Kubernetes label key ([prefix/]name, name at most 63 characters)")
        if not isinstance(value, str) or len(value) > DNS1123_LABEL_MAX or not LABEL_VALUE_RE.match(value):
            raise SpecError(f"labels.{key}", value,
                            "a label value: at most 63 letters, digits, '-', '_' or '.', alphanumeric at both ends")
        checked[key] = value
    return checked


def _env(workload: WorkloadSpec) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": name, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{annotation}']"}}}
        for name, annotation in FIELD_REF_ENV
    ]
    reserved = {name for name, _ in FIELD_REF_ENV}
    for name, value in (workload.env or {}).items():
        field = f"workload.env.{name}"
        if not isinstance(name, str) or not ENV_NAME_RE.match(name):
            raise SpecError(field, name, "an environment variable name: letters, digits and '_', not starting with a digit")
        if name in reserved:
            raise SpecError(field, value, f"a name other than the ones the provider sets ({', '.join(sorted(reserved))})")
        if not isinstance(value, str):
            raise SpecError(field, value, "a string (quote numbers and booleans in YAML)")
        env.append({"name": name, "value": value})
    return env


def escape_var_refs(value: str) -> str:
    """Kubernetes expands `$(VAR)` in args and reduces `$$` to `$`: doubling every `$` keeps a value literal."""
    return value.replace("$", "$$")


def _container(slices: SliceSpec, checkpointing: CheckpointingSpec, workload: WorkloadSpec) -> dict[str, Any]:
    command, args = container_command(checkpointing, workload)
    container: dict[str, Any] = {"name": workload.container_name, "image": workload.image, "command": command,
                                 "args": [escape_var_refs(arg) for arg in args], "env": _env(workload),
                                 "resources": {"limits": {TPU_RESOURCE: slices.chips_per_host}}}
    if checkpointing.local_tier:
        container["volumeMounts"] = [{"name": MTC_VOLUME_NAME, "mountPath": checkpointing.local_checkpoint_directory}]
    return container


def _pod_spec(slices: SliceSpec, checkpointing: CheckpointingSpec, workload: WorkloadSpec) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "serviceAccountName": workload.service_account,
        "terminationGracePeriodSeconds": workload.termination_grace_period_seconds,
        "nodeSelector": {TPU_ACCELERATOR_LABEL: slices.accelerator_label, TPU_TOPOLOGY_LABEL: slices.topology},
        "tolerations": [{"key": TPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [_container(slices, checkpointing, workload)],
    }
    if checkpointing.local_tier:
        # The MTC driver provisions the ramdisk (sized by the CheckpointConfiguration) and writes
        # jax-init-info.txt at its root.
        spec["volumes"] = [{"name": MTC_VOLUME_NAME, "csi": {"driver": MTC_CSI_DRIVER}}]
    return spec


def build_jobset(slices: SliceSpec, checkpointing: CheckpointingSpec, workload: WorkloadSpec,
                 labels: Mapping[str, str] | None = None,
                 customization: CustomizationSpec | None = None) -> dict[str, Any]:
    """The JobSet for `slices.num_slices` slices of `slices.hosts_per_slice` hosts each, customized."""
    jobset = _base_jobset(slices, checkpointing, workload, labels)
    return apply_customization(jobset, customization or CustomizationSpec(), workload.container_name,
                               lambda obj: provider_owned(obj, workload.container_name))


def _base_jobset(slices: SliceSpec, checkpointing: CheckpointingSpec, workload: WorkloadSpec,
                 labels: Mapping[str, str] | None) -> dict[str, Any]:
    all_labels = {RUN_NAME: label_value(checkpointing.run_name), MANAGED_BY: MANAGED_BY_VALUE, **check_labels(labels)}
    hosts = slices.hosts_per_slice
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": workload.jobset_name,
            "namespace": workload.namespace,
            "labels": dict(all_labels),
            # One slice per node pool: JobSet places each replicated Job on its own node pool.
            "annotations": {EXCLUSIVE_TOPOLOGY_ANNOTATION: NODEPOOL_LABEL},
        },
        "spec": {
            "failurePolicy": failure_policy(workload.max_restarts),
            "replicatedJobs": [
                {
                    "name": workload.replicated_job_name,
                    "replicas": slices.num_slices,
                    "template": {
                        "spec": {
                            "parallelism": hosts,
                            "completions": hosts,
                            # Any pod failure fails the Job; the JobSet failurePolicy decides what happens next.
                            "backoffLimit": 0,
                            "completionMode": "Indexed",
                            "podFailurePolicy": pod_failure_policy(workload.container_name),
                            "template": {"metadata": {"labels": dict(all_labels)},
                                         "spec": _pod_spec(slices, checkpointing, workload)},
                        }
                    },
                }
            ],
        },
    }


def build_jobset_for_run(config: RunConfig, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    return build_jobset(config.slices, config.checkpointing, config.workload, labels, config.customization)


def _is_provider_label(key: str) -> bool:
    return key == MANAGED_BY or key.startswith(f"{LABEL_PREFIX}/")


def provider_owned(jobset: Mapping[str, Any], container_name: str) -> dict[str, Any]:
    """The fields the provider owns, by path: an override that changes one of them is refused.

    The identity and run labels (reattaching finds attempts by them), the failure policies (the retry/bug
    split), the TPU shape, the training container's command and args (the checkpoint flags), the MTC volume and
    its mount, and the env the workload reads to know where it runs.
    """
    meta = jobset.get("metadata", {})
    owned: dict[str, Any] = {
        "apiVersion": jobset.get("apiVersion"),
        "kind": jobset.get("kind"),
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        f"metadata.annotations.{EXCLUSIVE_TOPOLOGY_ANNOTATION}": (meta.get("annotations") or {}).get(
            EXCLUSIVE_TOPOLOGY_ANNOTATION),
        "spec.failurePolicy": jobset["spec"].get("failurePolicy"),
        "spec.replicatedJobs[*].name": [job.get("name") for job in jobset["spec"]["replicatedJobs"]],
    }
    for key, value in (meta.get("labels") or {}).items():
        if _is_provider_label(key):
            owned[f"metadata.labels.{key}"] = value
    for job in jobset["spec"]["replicatedJobs"]:
        at = f"spec.replicatedJobs[{job.get('name')}]"
        owned[f"{at}.replicas"] = job.get("replicas")
        spec = (job.get("template") or {}).get("spec") or {}
        for key in ("parallelism", "completions", "backoffLimit", "completionMode", "podFailurePolicy"):
            owned[f"{at}.template.spec.{key}"] = spec.get(key)
        template = spec.get("template") or {}
        for key, value in (template.get("metadata", {}).get("labels") or {}).items():
            if _is_provider_label(key):
                owned[f"{at}.template.metadata.labels.{key}"] = value
        pod = template.get("spec") or {}
        pod_at = f"{at}.template.spec"
        owned[f"{pod_at}.restartPolicy"] = pod.get("restartPolicy")
        for key in (TPU_ACCELERATOR_LABEL, TPU_TOPOLOGY_LABEL):
            owned[f"{pod_at}.nodeSelector.{key}"] = (pod.get("nodeSelector") or {}).get(key)
        owned[f"{pod_at}.volumes[{MTC_VOLUME_NAME}]"] = [v for v in pod.get("volumes") or []
                                                          if v.get("name") == MTC_VOLUME_NAME]
        main = [c for c in pod.get("containers") or [] if c.get("name") == container_name]
        owned[f"{pod_at}.containers[{container_name}]"] = bool(main)
        for container in main:
            c_at = f"{pod_at}.containers[{container_name}]"
            for key in ("command", "args"):
                owned[f"{c_at}.{key}"] = container.get(key)
            owned[f"{c_at}.resources.limits.{TPU_RESOURCE}"] = (container.get("resources", {}).get("limits") or {}).get(
                TPU_RESOURCE)
            owned[f"{c_at}.volumeMounts[{MTC_VOLUME_NAME}]"] = [m for m in container.get("volumeMounts") or []
                                                                 if m.get("name") == MTC_VOLUME_NAME]
            for name, _ in FIELD_REF_ENV:
                owned[f"{c_at}.env[{name}]"] = [e for e in container.get("env") or [] if e.get("name") == name]
    return owned


def pod_template(jobset: Mapping[str, Any]) -> dict[str, Any]:
    """The pod template of the (single) replicatedJob: what each host runs."""
    return jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
