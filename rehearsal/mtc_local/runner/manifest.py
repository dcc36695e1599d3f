"""Read a rendered JobSet dict into what the local runner needs: pure, validated before any side effect.

The runner takes the very dict sent to GKE. What it uses: metadata.name/namespace/labels/annotations;
spec.failurePolicy; per replicatedJob: name, replicas (slices), template.spec.completions (hosts),
backoffLimit, podFailurePolicy, and the pod's one container (command, args, env, volumeMounts),
volumes and terminationGracePeriodSeconds. The image, node selectors and tolerations are ignored.

Processes cannot mount, so the MTC CSI volume becomes a per-host directory on tmpfs and every occurrence of
its mountPath (as a path prefix) in the container's command, args and env values is rewritten to that directory.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from mtc_provider.core.basics.errors import SpecError, require
from mtc_provider.core.basics.vocabulary import MTC_CSI_DRIVER
from mtc_local.runner.environment import workload_environment

LOG_DIR_ANNOTATION = "mtc.local/log-dir"
FAULT_PLAN_ANNOTATION = "mtc.local/fault-plan"  # the run's faults (JSON), put there by the local target's backend
POD_ACTIONS = ("FailJob", "FailIndex", "Ignore", "Count")
JOBSET_ACTIONS = ("FailJobSet", "RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts")
DEFAULT_BACKOFF_LIMIT = 6  # Kubernetes' default for a Job
DEFAULT_GRACE_SECONDS = 30.0  # Kubernetes' default terminationGracePeriodSeconds

_PYTHON = re.compile(r"^python(3(\.\d+)?)?$")
_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class PodRule:
    """One podFailurePolicy rule: onExitCodes, or onPodConditions (a local pod has the DisruptionTarget condition
    when a fault models a disruption: runner.jobset). `index` is its place in the rules, which the Job
    controller's failure message names."""

    action: str
    operator: str = ""
    values: frozenset[int] = frozenset()
    container_name: str | None = None
    conditions: tuple[str, ...] = ()  # onPodConditions: the condition types (status "True") that match
    index: int = 0

    def matches(self, container_name: str, exit_code: int | None, pod_conditions: tuple[str, ...] = ()) -> bool:
        if self.conditions:  # Kubernetes: one of onExitCodes / onPodConditions per rule
            return any(kind in pod_conditions for kind in self.conditions)
        if exit_code is None or (self.container_name and self.container_name != container_name):
            return False
        return (exit_code in self.values) == (self.operator == "In")


@dataclass(frozen=True)
class JobSetRule:
    """One spec.failurePolicy.rules entry."""

    name: str
    action: str
    on_job_failure_reasons: tuple[str, ...] = ()
    target_replicated_jobs: tuple[str, ...] = ()
    on_job_failure_message_patterns: tuple[str, ...] = ()  # regexes; one must match the Job's failure message


@dataclass(frozen=True)
class ReplicatedJob:
    name: str
    replicas: int
    completions: int
    backoff_limit: int
    container_name: str
    command: tuple[str, ...]
    env: tuple[dict[str, Any], ...]
    mtc_mount_path: str | None
    grace_seconds: float
    pod_rules: tuple[PodRule, ...]
    first_slice: int  # global index of this replicatedJob's job 0


@dataclass(frozen=True)
class JobSetPlan:
    namespace: str
    name: str
    replicated_jobs: tuple[ReplicatedJob, ...]
    has_failure_policy: bool
    max_restarts: int
    rules: tuple[JobSetRule, ...]

    @property
    def num_slices(self) -> int:
        return sum(rj.replicas for rj in self.replicated_jobs)

    @property
    def hosts_per_slice(self) -> int:
        return self.replicated_jobs[0].completions

    def slices(self) -> list[tuple[ReplicatedJob, int, int]]:
        """(replicatedJob, job index, global slice index) for every Job."""
        return [(rj, j, rj.first_slice + j) for rj in self.replicated_jobs for j in range(rj.replicas)]

    def grace_seconds(self) -> float:
        return max(rj.grace_seconds for rj in self.replicated_jobs)


def _get(obj: Any, field: str, key: str, kind: type, default: Any = ...) -> Any:
    value = obj.get(key, default) if isinstance(obj, Mapping) else default
    if value is ...:
        raise SpecError(f"{field}.{key}", None, f"a {kind.__name__} (required)")
    if value is not None and not isinstance(value, kind):
        raise SpecError(f"{field}.{key}", value, f"a {kind.__name__}")
    return value


def _int(field: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SpecError(field, value, f"an integer >= {minimum}")
    return value


def _pod_rules(field: str, policy: Mapping[str, Any] | None) -> tuple[PodRule, ...]:
    rules = []
    for i, rule in enumerate(_get(policy or {}, field, "rules", list, [])):
        where = f"{field}.rules[{i}]"
        action = _get(rule, where, "action", str)
        require(action in POD_ACTIONS, f"{where}.action", action, ", ".join(POD_ACTIONS))
        codes = _get(rule, where, "onExitCodes", dict, None)
        if not codes:
            patterns = _get(rule, where, "onPodConditions", list, [])
            kinds = []
            for j, pattern in enumerate(patterns):
                require(isinstance(pattern, dict) and isinstance(pattern.get("type"), str),
                        f"{where}.onPodConditions[{j}].type", pattern, "a pod condition type (a string)")
                if pattern.get("status", "True") == "True":  # local pods only ever have True conditions
                    kinds.append(pattern["type"])
            rules.append(PodRule(action, conditions=tuple(kinds), index=i))
            continue
        operator = _get(codes, f"{where}.onExitCodes", "operator", str)
        require(operator in ("In", "NotIn"), f"{where}.onExitCodes.operator", operator, "In, NotIn")
        values = _get(codes, f"{where}.onExitCodes", "values", list)
        for value in values:
            _int(f"{where}.onExitCodes.values", value, 0)
        rules.append(PodRule(action, operator, frozenset(values), codes.get("containerName"), index=i))
    return tuple(rules)


def _replicated_job(i: int, rj: Mapping[str, Any], first_slice: int) -> ReplicatedJob:
    field = f"spec.replicatedJobs[{i}]"
    name = _get(rj, field, "name", str)
    replicas = _int(f"{field}.replicas", rj.get("replicas", 1), 1)
    job = _get(_get(rj, field, "template", dict), f"{field}.template", "spec", dict)
    job_field = f"{field}.template.spec"
    completions = _int(f"{job_field}.completions", job.get("completions", 1), 1)
    backoff = _int(f"{job_field}.backoffLimit", job.get("backoffLimit", DEFAULT_BACKOFF_LIMIT), 0)
    pod_rules = _pod_rules(f"{job_field}.podFailurePolicy", _get(job, job_field, "podFailurePolicy", dict, None))
    pod_field = f"{job_field}.template.spec"
    pod = _get(_get(job, job_field, "template", dict), f"{job_field}.template", "spec", dict)
    containers = _get(pod, pod_field, "containers", list)
    require(len(containers) == 1, f"{pod_field}.containers", len(containers), "exactly one container locally")
    container = containers[0]
    c_field = f"{pod_field}.containers[0]"
    command = list(_get(container, c_field, "command", list, None) or []) + list(
        _get(container, c_field, "args", list, None) or []
    )
    require(bool(command), f"{c_field}.command", None, "a command (the local runner has no image entrypoint)")
    for part in command:
        require(isinstance(part, str), f"{c_field}.command", part, "strings")
    env = tuple(_get(container, c_field, "env", list, None) or [])
    for j, var in enumerate(env):
        _get(var, f"{c_field}.env[{j}]", "name", str)
    mtc_volumes = {
        v.get("name")
        for v in _get(pod, pod_field, "volumes", list, None) or []
        if isinstance(v, Mapping) and (v.get("csi") or {}).get("driver") == MTC_CSI_DRIVER
    }
    mounts = [
        m["mountPath"]
        for m in _get(container, c_field, "volumeMounts", list, None) or []
        if isinstance(m, Mapping) and m.get("name") in mtc_volumes and m.get("mountPath")
    ]
    grace = pod.get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or grace < 0:
        raise SpecError(f"{pod_field}.terminationGracePeriodSeconds", grace, "a number of seconds >= 0")
    return ReplicatedJob(
        name=name,
        replicas=replicas,
        completions=completions,
        backoff_limit=backoff,
        container_name=container.get("name", ""),
        command=tuple(command),
        env=env,
        mtc_mount_path=(mounts[0].rstrip("/") or "/") if mounts else None,
        grace_seconds=float(grace),
        pod_rules=pod_rules,
        first_slice=first_slice,
    )


def parse(namespace: str, body: Mapping[str, Any]) -> JobSetPlan:
    """Validate the JobSet dict and return the plan; raise SpecError naming the field on bad input."""
    require(isinstance(body, Mapping), "body", type(body).__name__, "a JobSet dict")
    require(bool(namespace) and bool(_NAME.match(namespace)), "namespace", namespace, "a DNS label")
    metadata = _get(body, "", "metadata", dict)
    name = _get(metadata, "metadata", "name", str)
    require(bool(_NAME.match(name)), "metadata.name", name, "a DNS label (lowercase letters, digits, '-')")
    meta_ns = metadata.get("namespace")
    require(meta_ns in (None, namespace), "metadata.namespace", meta_ns, f"absent or {namespace!r}")
    spec = _get(body, "", "spec", dict)
    rjs_raw = _get(spec, "spec", "replicatedJobs", list)
    require(bool(rjs_raw), "spec.replicatedJobs", rjs_raw, "at least one replicatedJob")
    rjs, first = [], 0
    for i, raw in enumerate(rjs_raw):
        rj = _replicated_job(i, raw, first)
        rjs.append(rj)
        first += rj.replicas
    names = [rj.name for rj in rjs]
    require(len(set(names)) == len(names), "spec.replicatedJobs[].name", names, "unique names")
    policy = _get(spec, "spec", "failurePolicy", dict, None)
    rules = []
    for i, rule in enumerate(_get(policy or {}, "spec.failurePolicy", "rules", list, [])):
        where = f"spec.failurePolicy.rules[{i}]"
        action = _get(rule, where, "action", str)
        require(action in JOBSET_ACTIONS, f"{where}.action", action, ", ".join(JOBSET_ACTIONS))
        rules.append(
            JobSetRule(
                name=rule.get("name", ""),
                action=action,
                on_job_failure_reasons=tuple(rule.get("onJobFailureReasons") or ()),
                target_replicated_jobs=tuple(rule.get("targetReplicatedJobs") or ()),
                on_job_failure_message_patterns=tuple(rule.get("onJobFailureMessagePatterns") or ()),
            )
        )
    max_restarts = _int("spec.failurePolicy.maxRestarts", (policy or {}).get("maxRestarts", 0), 0)
    return JobSetPlan(namespace, name, tuple(rjs), policy is not None, max_restarts, tuple(rules))


def rewrite_mount(value: str, mount_path: str | None, host_dir: Path) -> str:
    """Replace the mountPath used as a path prefix (`/local`, `/local/x`, `dir=/local`) by the host directory."""
    if not mount_path:
        return value
    pattern = r"(?<![\w./-])" + re.escape(mount_path) + r"(?=/|$|[^\w.-])"
    return re.sub(pattern, lambda _: str(host_dir), value)


def expand_vars(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: known names are replaced, `$$` escapes, unknown references stay."""

    def sub(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _VAR_REF.sub(sub, value)


@dataclass(frozen=True)
class PodSpec:
    """One process to start: argv, full environment, and where its ramdisk lives."""

    slice_index: int
    host: int
    process_id: int
    name: str
    argv: tuple[str, ...]
    env: dict[str, str]
    ramdisk: Path


def pod_spec(
    plan: JobSetPlan,
    rj: ReplicatedJob,
    job_index: int,
    slice_index: int,
    host: int,
    coordinator: str,
    ramdisk: Path,
    restart: int,
    base_env: Mapping[str, str] | None = None,
) -> PodSpec:
    """The process for one host of one slice, with the env vars JobSet and the MTC driver provide."""
    process_id = slice_index * plan.hosts_per_slice + host
    pod_name = f"{plan.name}-{rj.name}-{job_index}-{host}"
    # Not a copy of the parent's environment: the workload's needs only (environment.py), then what JobSet declares.
    env = workload_environment(os.environ if base_env is None else base_env)
    env.update(
        {
            "JOBSET_NAME": plan.name,
            "REPLICATED_JOB_NAME": rj.name,
            "REPLICATED_JOB_REPLICAS": str(rj.replicas),
            "JOB_INDEX": str(job_index),
            "JOB_COMPLETION_INDEX": str(host),
            "JOBSET_RESTART_ATTEMPT": str(restart),
            "MTC_NUM_SLICES": str(plan.num_slices),
            "MTC_HOSTS_PER_SLICE": str(plan.hosts_per_slice),
            "MTC_PROCESS_ID": str(process_id),
            "MTC_COORDINATOR_ADDRESS": coordinator,
            "HOSTNAME": pod_name,
        }
    )
    fields = {
        "metadata.name": pod_name,
        "metadata.namespace": plan.namespace,
        "status.podIP": "127.0.0.1",
        "status.hostIP": "127.0.0.1",
        "spec.nodeName": "localhost",
    }
    # The annotations and labels JobSet's controller puts on every pod, readable through the downward API.
    pod_metadata = {
        "jobset.sigs.k8s.io/jobset-name": plan.name,
        "jobset.sigs.k8s.io/replicatedjob-name": rj.name,
        "jobset.sigs.k8s.io/job-index": str(job_index),
        "jobset.sigs.k8s.io/restart-attempt": str(restart),
        "batch.kubernetes.io/job-completion-index": str(host),
    }
    for key, value in pod_metadata.items():
        for kind in ("annotations", "labels"):
            fields[f"metadata.{kind}['{key}']"] = value
            fields[f'metadata.{kind}["{key}"]'] = value
    for var in rj.env:
        if "value" in var:
            value = expand_vars(str(var["value"]), env)
        else:
            ref = ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
            value = fields.get(ref, "")
        env[var["name"]] = rewrite_mount(value, rj.mtc_mount_path, ramdisk)
    argv = [rewrite_mount(expand_vars(part, env), rj.mtc_mount_path, ramdisk) for part in rj.command]
    if _PYTHON.match(argv[0]):
        argv[0] = sys.executable
    return PodSpec(slice_index, host, process_id, pod_name, tuple(argv), env, ramdisk)
