"""What a run will check, create and bind, computed from the run description alone (no cluster calls).

`mtc plan` prints it; the Airflow operators follow the same steps. On a kind whose workload runs as local processes
(the local target) the GKE steps do not apply, and the plan says so instead of dropping them silently; a kind's
rules (core.basics.kind_rules) say which cluster checks it can make.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mtc_provider.core.definition.render.checkpoint_config import build_checkpoint_configuration
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.definition.cluster.iam import BUCKET_ROLE, bucket_members, workload_identity_pool
from mtc_provider.core.definition.render.jobset_manifest import build_jobset_for_run
from mtc_provider.core.basics.kind_rules import rules_for
from mtc_provider.core.definition.shape.sizing import RamdiskSize
from mtc_provider.core.definition.description.spec import RunConfig
from mtc_provider.core.basics.versions import MTC_MIN_VERSION_EXCLUSIVE, MTC_MIN_VERSION_NEW

PROJECT_NUMBER_PLACEHOLDER = "<PROJECT_NUMBER>"
PROJECT_ID_PLACEHOLDER = "<PROJECT_ID>"  # a kubernetes target without a cluster section
# iam.ksa_principal insists on digits; render with a digit sentinel, then show the placeholder.
_SENTINEL_NUMBER = "0"
_SENTINEL_PREFIX = f"principal://iam.googleapis.com/projects/{_SENTINEL_NUMBER}/"
_PLACEHOLDER_PREFIX = f"principal://iam.googleapis.com/projects/{PROJECT_NUMBER_PLACEHOLDER}/"


@dataclass(frozen=True)
class Step:
    """One thing the run checks or creates; `local` says what happens on the local target instead (None: same)."""

    name: str
    description: str
    applies_locally: bool = False
    local: str | None = None


@dataclass(frozen=True)
class Binding:
    resource: str
    role: str
    member: str


@dataclass(frozen=True)
class Plan:
    target: str
    checks: tuple[Step, ...]
    creates: tuple[Step, ...]
    binds: tuple[Binding, ...]
    ramdisk: RamdiskSize
    manifests: tuple[dict[str, Any], ...]
    not_applicable_locally: tuple[str, ...] = field(default=())
    warnings: tuple[str, ...] = field(default=())
    local: bool = False  # the workload runs as local processes (the kind's rules): steps say what happens instead

    @property
    def members(self) -> list[str]:
        return [binding.member for binding in self.binds]

    def _describe(self, step: Step) -> str:
        return step.local if self.local and step.local else step.description

    @property
    def not_applicable_title(self) -> str:
        return f"not applicable {'locally' if self.local else 'on the ' + self.target + ' target'}"

    def lines(self) -> dict[str, list[str]]:
        """The plan as plain text lines per section (the CLI prints them; tests read them)."""
        sections: dict[str, list[str]] = {
            "checks": [f"{step.name}: {self._describe(step)}" for step in self.checks],
            "creates": [f"{step.name}: {step.description}" for step in self.creates],
            "binds": [f"{b.role} on {b.resource} to {b.member}" for b in self.binds] or ["none"],
            "ramdisk": self.ramdisk.walkthrough(),
            "manifests": [f"{m['kind']} {m['metadata']['name']}" for m in self.manifests],
        }
        if self.not_applicable_locally:
            sections[self.not_applicable_title] = list(self.not_applicable_locally)
        if self.warnings:
            sections["warnings"] = list(self.warnings)
        return sections


def _members(config: RunConfig, project_number: str | None) -> list[str]:
    cluster = config.cluster  # required on the gke target; optional on kubernetes (then the project is unknown)
    project_id = cluster.project_id if cluster else PROJECT_ID_PLACEHOLDER
    number = str(project_number or (cluster.project_number if cluster else "") or "")
    if number and not number.isdigit():
        raise SpecError("cluster.project_number", project_number, "the project's number (digits)")
    workload = config.workload
    if number:
        return bucket_members(project_id, number, workload.namespace, workload.service_account)
    members = bucket_members(project_id, _SENTINEL_NUMBER, workload.namespace, workload.service_account)
    return [_PLACEHOLDER_PREFIX + member[len(_SENTINEL_PREFIX):] for member in members]


def _checks(config: RunConfig) -> tuple[Step, ...]:
    slices = config.slices
    project = config.cluster.project_id if config.cluster else "<PROJECT_ID>"
    return (
        Step("addons", "HighScaleCheckpointing and GcsFuseCsiDriver addons enabled"),
        Step("workload-pool", f"Workload Identity pool {workload_identity_pool(project)}"),
        Step("version", f"GKE version {MTC_MIN_VERSION_NEW} or later to enable MTC (later than "
                        f"{MTC_MIN_VERSION_EXCLUSIVE} where its addon already runs)"),
        Step("standard-cluster", "a Standard cluster (Autopilot is not supported by MTC)"),
        Step(
            "tpu-node-pools",
            f">= {slices.num_slices} TPU node pools of machine type {slices.machine_type} and topology "
            f"{slices.topology} ({slices.hosts_per_slice} hosts each)",
            applies_locally=True,
            local=f"{slices.num_slices} x {slices.hosts_per_slice} local processes",
        ),
    )


def build_plan(config: RunConfig, project_number: str | None = None) -> Plan:
    """Everything `mtc plan` shows for this run; raises SpecError before anything is created."""
    slices, checkpointing = config.slices, config.checkpointing
    checked = config.checks  # the cross-section rules ran once, when the description was validated
    size, warnings = checked.ramdisk, checked.warnings
    from mtc_provider.core.definition.description.run import stall_rule

    warnings = (*warnings, *stall_rule(config)[2])  # an explicit stall_timeout against the run's cadence
    assert size is not None  # sizing was given
    jobset = build_jobset_for_run(config)
    checks = _checks(config)
    rules = rules_for(config.target)
    if rules.local_processes:
        return Plan(
            target=config.target, local=True,
            checks=tuple(step for step in checks if step.applies_locally),
            creates=(
                Step("checkpoint-directory", f"local directory {checkpointing.base_output_directory}", True),
                Step("ramdisk", f"a per-host directory under /dev/shm mounted as {checkpointing.local_checkpoint_directory}"
                     if checkpointing.local_tier else "none (no local checkpoint tier)", True),
                Step("jobset", f"JobSet {config.workload.jobset_name} run as local processes", True),
            ),
            binds=(),
            ramdisk=size,
            manifests=(jobset,),
            warnings=warnings,
            not_applicable_locally=tuple(
                [f"{step.name}: {step.description}" for step in checks if not step.applies_locally]
                + ["bucket: no GCS bucket (checkpoints go to a local directory)",
                   "checkpoint-configuration: no CheckpointConfiguration (no MTC driver locally)",
                   f"iam: no {BUCKET_ROLE} bindings (no IAM locally)"]
            ),
        )
    bucket = config.bucket
    assert bucket is not None  # RunConfig requires it on the gke and kubernetes targets
    # base_output_directory is in this bucket: RunConfig checked it, for every entry point.
    checkpoint_configuration = build_checkpoint_configuration(config.checkpoint_configuration_name, bucket.name, slices,
                                                              size)
    resource = f"gs://{bucket.name}"
    not_applicable: tuple[str, ...] = ()
    if rules.plan_checks is not None:  # e.g. no managed control plane: only what the Kubernetes API shows
        checks, not_applicable = rules.plan_checks(checks)
    return Plan(
        target=config.target,
        checks=checks,
        creates=(
            Step("bucket", f"{resource} in {bucket.location} with hierarchical namespace and uniform access"),
            Step(
                "checkpoint-configuration",
                f"CheckpointConfiguration {config.checkpoint_configuration_name} (cluster-scoped): "
                f"inMemoryVolumeSize {size.quantity} on {slices.machine_type} nodes, backed by {resource}",
            ),
            Step("jobset", f"JobSet {config.workload.namespace}/{config.workload.jobset_name}: "
                 f"{slices.num_slices} slices x {slices.hosts_per_slice} hosts"),
        ),
        binds=tuple(Binding(resource, BUCKET_ROLE, member) for member in _members(config, project_number)),
        ramdisk=size,
        # The CheckpointConfiguration first: the MTC driver needs it before the JobSet's pods mount the ramdisk.
        manifests=(checkpoint_configuration, jobset),
        warnings=warnings,
        not_applicable_locally=not_applicable,
    )
