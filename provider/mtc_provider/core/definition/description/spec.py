"""The run description: MaxText's checkpointing flags (the guide's table), the workload and the whole run.

Defaults are exactly the guide's. Validation happens in __post_init__, before anything touches a
cluster, and every error names the field, the bad value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from mtc_provider.core.definition.render.customization import CustomizationSpec
from mtc_provider.core.basics.errors import SpecError, positive_int, require
from mtc_provider.core.definition.render.flag_table import default as flag_default
from mtc_provider.core.definition.render.graceful_exit import (MODES as GRACEFUL_MODES,
                                                               MODES_ALLOWED as GRACEFUL_MODES_ALLOWED,
                                                               OPERATOR as GRACEFUL_DEFAULT)
from mtc_provider.core.basics.kind_rules import no_faults_on, rules_for
from mtc_provider.core.definition.description.locations import (REGION_RE, ZONE_RE, check_bucket_location,
                                                                check_bucket_name, check_project_id)
from mtc_provider.core.definition.render.maxtext import (DEFAULT_LAYOUT, check_command_layout, check_multi_tier,
                                                         check_target_mode, maxtext_command)
from mtc_provider.core.basics.names import (REPLICATED_JOB_NAME_MAX, check_checkpoint_configuration_name,
                                            check_dns1123_label, check_gke_name, check_jobset_name, check_namespace,
                                            check_run_name, check_service_account)
from mtc_provider.core.definition.description.run_checks import RunChecks, check_run
from mtc_provider.core.definition.shape.sizing import RamdiskSize, ramdisk_size
from mtc_provider.core.definition.shape.tpu import SliceSpec

# Directories a ramdisk must never be mounted over.
SYSTEM_DIRECTORIES = frozenset(
    {"/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/opt", "/proc", "/root", "/run", "/sbin", "/srv",
     "/sys", "/usr", "/var", "/tmp", "/dev/shm"}
)
# ... nor anywhere below these: the image's programs, libraries and configuration, and the kernel's files.
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/sbin", "/sys", "/usr",
                "/var/lib")
CLEAN_PATH_RE = re.compile(r"^(/[A-Za-z0-9._-]+)+$")
# A container image reference: [registry[:port]/]path[:tag][@sha256:digest], lower-case path components.
IMAGE_RE = re.compile(
    r"^[a-z0-9]([a-z0-9._-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[0-9a-f]{64})?$"
)
DEFAULT_MAX_RESTARTS = 3
# JobSet's CRD takes failurePolicy.maxRestarts up to int32 (2^31-1), but each counted restart recreates every slice's
# pods (scheduling, image pull, JAX start-up and a restore: minutes), and disruptions do not count toward it
# (RestartJobSetAndIgnoreMaxRestarts): 1000 counted crashes is already days of restarting one attempt, and the DAG's
# retries are the next layer. Above it is a typo, not a policy (docs/field-rules.md).
MAX_RESTARTS_BOUND = 1000
# Kubernetes PodSpec.terminationGracePeriodSeconds is an int64.
INT64_MAX = 2**63 - 1
LOCAL_IMAGE = "local"  # the local target runs no image; a placeholder where a form asks for one


def _under(path: str, tree: str) -> bool:
    return path == tree or path.startswith(tree + "/")


def normalize_local_directory(directory: Any) -> str:
    """`/local/../etc` -> `/etc`, `//etc` -> `/etc`: the path a mount really lands on (normpath keeps `//`)."""
    if not isinstance(directory, str) or not directory.startswith("/"):
        return ""
    return "/" + posixpath.normpath(directory).lstrip("/")


MIN_POLL_INTERVAL_S = 1.0  # below this a watch or listing loop only loads the API server and the bucket


@dataclass(frozen=True)
class CheckpointingSpec:
    """MaxText's eight checkpointing flags with the guide's defaults, plus run identity and length."""

    run_name: str
    base_output_directory: str
    steps: int
    # MaxText's eight flags: types and defaults from the one flag table (core.definition.render.flag_table), which the local
    # workload parses with too.
    enable_checkpointing: bool = flag_default("enable_checkpointing")
    enable_emergency_checkpoint: bool = flag_default("enable_emergency_checkpoint")
    async_checkpointing: bool = flag_default("async_checkpointing")
    local_checkpoint_directory: str = flag_default("local_checkpoint_directory")
    local_checkpoint_period: int = flag_default("local_checkpoint_period")
    checkpoint_period: int = flag_default("checkpoint_period")
    enable_single_replica_ckpt_restoring: bool = flag_default("enable_single_replica_ckpt_restoring")
    enable_autocheckpoint: bool = flag_default("enable_autocheckpoint")
    # MaxText's multi-tier mode (0.2.5 prefers it to the legacy enable_emergency_checkpoint; docs/maxtext.md).
    enable_multi_tier_checkpointing: bool = False
    multi_tier_checkpointing_backup_interval_minutes: int | None = None
    multi_tier_checkpointing_backup_interval_steps: int | None = None
    use_replicator_service: bool = False

    def __post_init__(self) -> None:
        check_run_name(self.run_name)
        base = self.base_output_directory
        require(isinstance(base, str) and (base.startswith("gs://") and len(base) > 5 or base.startswith("/")),
                "checkpointing.base_output_directory", base, "a gs://BUCKET[/PATH] URL or an absolute local path")
        if isinstance(base, str) and base.startswith("/"):
            require(base.rstrip("/") == normalize_local_directory(base) or base == "/",
                    "checkpointing.base_output_directory", base,
                    f"a normalized absolute path (no '.', '..' or '//' parts), e.g. {normalize_local_directory(base)}")
        positive_int("checkpointing.steps", self.steps)
        for name in ("enable_checkpointing", "enable_emergency_checkpoint", "async_checkpointing",
                     "enable_single_replica_ckpt_restoring", "enable_autocheckpoint", "enable_multi_tier_checkpointing",
                     "use_replicator_service"):
            require(isinstance(getattr(self, name), bool), f"checkpointing.{name}", getattr(self, name), "true or false")
        require(isinstance(self.local_checkpoint_directory, str), "checkpointing.local_checkpoint_directory",
                self.local_checkpoint_directory, "a path (a string), or empty for MaxText's default")
        self._check_periods()
        check_multi_tier(self)
        if self.local_tier:
            self._validate_emergency()

    def _check_periods(self) -> None:
        """The two periods' every rule, in one place (the only check on the way from a form or file to the
        manifest that reads checkpoint_period; rendering checks nothing again)."""
        period, local = self.checkpoint_period, self.local_checkpoint_period
        positive_int("checkpointing.checkpoint_period", period)
        require(isinstance(local, int) and not isinstance(local, bool) and local >= 0,
                "checkpointing.local_checkpoint_period", local, "an integer >= 0 (0 turns local checkpoints off)")
        if self.enable_multi_tier_checkpointing:  # the replicator, not checkpoint_period, sets persistent saves
            require(local > 0, "checkpointing.local_checkpoint_period", local, "an integer > 0 in multi-tier mode")
        elif self.enable_emergency_checkpoint:
            require(local < period and local > 0, "checkpointing.local_checkpoint_period", local,
                    f"an integer > 0 and smaller than checkpoint_period ({period})")

    @property
    def local_tier(self) -> str | None:
        """Which flag turns on the ramdisk tier (emergency or multi-tier), or None."""
        if self.enable_multi_tier_checkpointing:
            return "enable_multi_tier_checkpointing"
        return "enable_emergency_checkpoint" if self.enable_emergency_checkpoint else None

    def _validate_emergency(self) -> None:
        require(self.enable_checkpointing, "checkpointing.enable_checkpointing", self.enable_checkpointing,
                f"true when {self.local_tier} is true")
        directory = self.local_checkpoint_directory
        normalized = normalize_local_directory(directory)
        require(bool(normalized) and normalized != "/" and bool(CLEAN_PATH_RE.match(normalized)),
                "checkpointing.local_checkpoint_directory", directory,
                "an absolute path to the ramdisk mount (not '/') of letters, digits, '.', '_', '-', e.g. /local")
        system = normalized in SYSTEM_DIRECTORIES or any(_under(normalized, tree) for tree in SYSTEM_TREES)
        require(
            not system,
            "checkpointing.local_checkpoint_directory",
            normalized,  # what the mount would really replace, whatever the spelling
            f"a path that is not a system location (not {', '.join(sorted(SYSTEM_DIRECTORIES))}, nor anything "
            f"under {', '.join(SYSTEM_TREES)}), e.g. /local",
        )
        # Manifests and flags carry the normalized path only.
        object.__setattr__(self, "local_checkpoint_directory", normalized)
        base = self.base_output_directory
        if base.startswith("/"):
            require(
                not _under(normalize_local_directory(base), normalized),
                "checkpointing.base_output_directory",
                normalize_local_directory(base),
                f"a directory outside local_checkpoint_directory ({normalized}): persistent checkpoints must not "
                "land in the ramdisk",
            )

    @property
    def checkpoint_directory(self) -> str:
        """Where MaxText writes persistent checkpoints: <base_output_directory>/<run_name>/checkpoints."""
        return f"{self.base_output_directory.rstrip('/')}/{self.run_name}/checkpoints"

    def maxtext_flags(self) -> dict[str, Any]:
        """The flags MaxText takes, in the guide's order, always with run_name and the output directory."""
        return {
            "run_name": self.run_name,
            "base_output_directory": self.base_output_directory,
            "steps": self.steps,
            "enable_checkpointing": self.enable_checkpointing,
            "enable_emergency_checkpoint": self.enable_emergency_checkpoint,
            "async_checkpointing": self.async_checkpointing,
            # MaxText 0.2.5 reads `local_checkpoint_directory=` as null and refuses it: empty means its default.
            **({"local_checkpoint_directory": self.local_checkpoint_directory} if self.local_checkpoint_directory else {}),
            "local_checkpoint_period": self.local_checkpoint_period,
            "checkpoint_period": self.checkpoint_period,
            "enable_single_replica_ckpt_restoring": self.enable_single_replica_ckpt_restoring,
            "enable_autocheckpoint": self.enable_autocheckpoint,
            **self._multi_tier_flags(),
        }

    def _multi_tier_flags(self) -> dict[str, Any]:
        """Only in multi-tier mode: releases before 0.2 do not know all of these keys."""
        if not self.enable_multi_tier_checkpointing:
            return {}
        flags: dict[str, Any] = {"enable_multi_tier_checkpointing": True}
        for unit in ("minutes", "steps"):
            value = getattr(self, f"multi_tier_checkpointing_backup_interval_{unit}")
            if value is not None:
                flags[f"multi_tier_checkpointing_backup_interval_{unit}"] = value
        if self.use_replicator_service:
            flags["use_replicator_service"] = True
        return flags


@dataclass(frozen=True)
class WorkloadSpec:
    """The container that trains: image and entry point, where it runs, and how JobSet restarts it."""

    jobset_name: str
    image: str = "us-docker.pkg.dev/example/maxtext:latest"
    command: tuple[str, ...] | None = None  # None: the trainer of `maxtext_layout`
    maxtext_layout: str = DEFAULT_LAYOUT  # current (MaxText >= 0.2) or pre-rename; docs/maxtext.md
    extra_flags: Mapping[str, Any] = field(default_factory=dict)
    namespace: str = "default"
    service_account: str = "default"
    container_name: str = "jax-tpu"
    replicated_job_name: str = "slice"
    max_restarts: int = DEFAULT_MAX_RESTARTS  # JobSet failurePolicy.maxRestarts: its one default
    # Long enough for an autocheckpoint save after SIGTERM (the guide's reactive path).
    termination_grace_period_seconds: int = 300
    env: Mapping[str, str] = field(default_factory=dict)
    # Who brings a graceful preemption back (core.definition.render.graceful_exit): the JobSet in the cluster, or the operator.
    graceful_preemption: str = GRACEFUL_DEFAULT

    def __post_init__(self) -> None:
        check_jobset_name(self.jobset_name)
        check_namespace(self.namespace)
        check_service_account(self.service_account)
        check_dns1123_label("workload.replicated_job_name", self.replicated_job_name, REPLICATED_JOB_NAME_MAX)
        check_dns1123_label("workload.container_name", self.container_name)
        require(isinstance(self.image, str) and bool(IMAGE_RE.match(self.image)), "workload.image", self.image,
                "a container image reference, e.g. us-docker.pkg.dev/PROJECT/REPO/maxtext:TAG")
        require(
            not isinstance(self.command, (str, bytes)),
            "workload.command",
            self.command,
            "a list of strings, one argument each (no shell string), e.g. [python3, -m, maxtext.trainers.pre_train.train]",
        )
        command = maxtext_command(self.maxtext_layout) if self.command is None else tuple(self.command)
        require(bool(command) and all(isinstance(part, str) and part for part in command), "workload.command",
                self.command, "a non-empty list of strings (no shell string)")
        check_command_layout(command, self.maxtext_layout)
        object.__setattr__(self, "command", command)
        require(
            isinstance(self.max_restarts, int) and not isinstance(self.max_restarts, bool)
            and 0 <= self.max_restarts <= MAX_RESTARTS_BOUND,
            "workload.max_restarts",
            self.max_restarts,
            f"an integer >= 0 and <= {MAX_RESTARTS_BOUND}: counted restarts of one attempt, each recreating every "
            "slice (disruptions do not count; the DAG's retries come after)",
        )
        positive_int("workload.termination_grace_period_seconds", self.termination_grace_period_seconds)
        require(self.graceful_preemption in GRACEFUL_MODES, "workload.graceful_preemption", self.graceful_preemption,
                GRACEFUL_MODES_ALLOWED)
        require(self.termination_grace_period_seconds <= INT64_MAX, "workload.termination_grace_period_seconds",
                self.termination_grace_period_seconds, f"at most {INT64_MAX} seconds (Kubernetes: an int64)")


@dataclass(frozen=True)
class ClusterSpec:
    project_id: str
    location: str
    name: str
    project_number: str = ""  # looked up through Resource Manager when empty
    # The TPU node pools' zones (the guide's --node-locations=${TPU_ZONE}); empty: a zonal cluster's own zone.
    node_locations: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_project_id(self.project_id)
        require(isinstance(self.location, str) and bool(REGION_RE.match(self.location) or ZONE_RE.match(self.location)),
                "cluster.location", self.location, "a GCP region or zone, e.g. us-central1 or us-central1-a")
        if self.node_locations:
            from mtc_provider.core.definition.shape.node_pools import node_locations

            require(isinstance(self.node_locations, (list, tuple)), "cluster.node_locations", self.node_locations,
                    "a list of zones, e.g. [us-central1-b]")
            object.__setattr__(self, "node_locations",
                               tuple(node_locations(self.location, self.node_locations, "cluster.node_locations")))
        check_gke_name("cluster.name", self.name)
        require(not self.project_number or str(self.project_number).isdigit(), "cluster.project_number",
                self.project_number, "the project's number (digits), or empty to look it up")


@dataclass(frozen=True)
class BucketSpec:
    name: str
    location: str = "us-central1"  # a region or multi-region, never a zone

    def __post_init__(self) -> None:
        check_bucket_name(self.name)
        check_bucket_location(self.location)


@dataclass(frozen=True)
class SizingSpec:
    parameters: float = 1e9
    bytes_per_parameter: float = 12
    buffer: float = 0.15
    # The guide advises a 10-15% buffer; another value must be asked for explicitly.
    allow_any_buffer: bool = False
    # A ramdisk above the node's allocatable memory (core.definition.shape.sizing.allocatable_memory_bytes) is refused unless asked.
    allow_ramdisk_above_allocatable: bool = False

    def __post_init__(self) -> None:
        for name in ("allow_any_buffer", "allow_ramdisk_above_allocatable"):
            require(isinstance(getattr(self, name), bool), f"sizing.{name}", getattr(self, name), "true or false")

    def size(self, hosts_per_slice: int) -> RamdiskSize:
        """The ramdisk per host, the guide's way (every place that sizes one calls this: allow_any_buffer too)."""
        return ramdisk_size(self.parameters, hosts_per_slice, self.bytes_per_parameter, self.buffer,
                            allow_any_buffer=self.allow_any_buffer)


@dataclass(frozen=True)
class RunConfig:
    """A whole run description, as `mtc plan` reads it from YAML."""

    slices: SliceSpec
    checkpointing: CheckpointingSpec
    workload: WorkloadSpec
    cluster: ClusterSpec | None = None
    bucket: BucketSpec | None = None
    sizing: SizingSpec = field(default_factory=SizingSpec)
    target: str = "gke"
    checkpoint_configuration_name: str = "mtc-checkpoint-config"
    customization: CustomizationSpec = field(default_factory=CustomizationSpec)  # Kueue, capacity, volumes, ...
    # How the run is driven (the DAG and the launch operator read them; `mtc render` ignores them).
    kubernetes_conn_id: str = "kubernetes_default"  # the kubernetes target's Airflow connection
    poll_interval: float | None = None  # seconds between JobSet status checks; None: the target's (core.definition.description.run)
    stall_timeout: float | None = None  # seconds without progress; None: derived from the cadence (core.measure.cadence)
    # Expected seconds per training step (e.g. from MaxText's published throughput); None: unknown until the run
    # reports it. It turns checkpoint periods into seconds for the stall limit and its plan-time check.
    step_seconds: float | None = None
    startup_timeout: float | None = None  # seconds one start of the pods may take; None: core.definition.cluster.startup's budget
    fault_plan: tuple[Mapping[str, Any], ...] = ()  # the local target's injected faults (docs: local target)
    # The launch's switches, one to one with the training DAG's form (docs/operators/jobset.md).
    apply_advice: bool = False  # the plan applies the last stored checkpoint advice for this run_name
    keep_failed_attempts: int = 0  # the newest failed attempts' JobSets kept in the cluster, for debugging
    pod_logs: bool = True  # stream the leader pod's log into the launch task's log
    pod_logs_interval: float = 30.0  # seconds between reads of that log

    def __post_init__(self) -> None:
        rules = rules_for(self.target)  # the registry's kinds: an unknown one names target.kind and the kinds there are
        for name in ("apply_advice", "pod_logs"):
            require(isinstance(getattr(self, name), bool), name, getattr(self, name), "true or false")
        require(isinstance(self.keep_failed_attempts, int) and not isinstance(self.keep_failed_attempts, bool)
                and self.keep_failed_attempts >= 0, "keep_failed_attempts", self.keep_failed_attempts,
                "an integer >= 0 (0: every failed attempt's JobSet is deleted before the next one)")
        require(isinstance(self.pod_logs_interval, (int, float)) and not isinstance(self.pod_logs_interval, bool)
                and self.pod_logs_interval >= 1, "pod_logs_interval", self.pod_logs_interval,
                "a number of seconds >= 1")
        if rules.connection_field:
            connection = getattr(self, rules.connection_field)
            require(isinstance(connection, str) and bool(connection), rules.connection_field, connection,
                    f"an Airflow Kubernetes connection id (the {self.target} target's cluster)")
        for name in ("poll_interval", "stall_timeout", "startup_timeout", "step_seconds"):
            value = getattr(self, name)
            lowest = {"poll_interval": MIN_POLL_INTERVAL_S, "stall_timeout": 1, "startup_timeout": 1}.get(name, 0.001)
            require(value is None or isinstance(value, (int, float)) and not isinstance(value, bool)
                    and value >= lowest, name, value, f"a number of seconds >= {lowest:g}, or empty (the target's)")
        if rules.check_fault_plan is not None:  # the kind injects faults (the local target's validator)
            object.__setattr__(self, "fault_plan", tuple(rules.check_fault_plan(
                list(self.fault_plan) if isinstance(self.fault_plan, tuple) else self.fault_plan,
                self.slices.num_slices, self.slices.hosts_per_slice, self.checkpointing.steps)))
        else:
            require(not self.fault_plan, "fault_plan", self.fault_plan, no_faults_on(self.target))
        check_target_mode(self.target, rules.local_processes, self.checkpointing, self.workload.command)
        check_checkpoint_configuration_name(self.checkpoint_configuration_name)
        if rules.cluster_required:
            require(self.cluster is not None, "cluster", None, "a cluster section (project_id, location, name)")
        if not rules.local_processes:
            # kubernetes: any cluster with JobSet (by an Airflow connection); a cluster section is optional there
            # and only names the project of the IAM principals.
            require(self.bucket is not None, "bucket", None, "a bucket section (name, location)")
            require(self.workload.image != LOCAL_IMAGE, "workload.image", self.workload.image,
                    f"a container image with MaxText on the {self.target} target, not the local placeholder")
            require(self.checkpointing.base_output_directory.startswith("gs://"), "checkpointing.base_output_directory",
                    self.checkpointing.base_output_directory, f"a gs:// URL on the {self.target} target")
            # Only the run's bucket gets the IAM bindings and the CheckpointConfiguration: a directory in another
            # bucket fails at the first persistent save, after compilation (hours in).
            require(bucket_of(self.checkpointing.base_output_directory) == self.bucket.name,
                    "checkpointing.base_output_directory", self.checkpointing.base_output_directory,
                    f"a URL in the run's bucket: gs://{self.bucket.name}/... (only that bucket gets the IAM bindings)")
        # The cross-section rules, once per description: `checks` keeps what they computed (the ramdisk, warnings)
        # for `mtc plan` and the training DAG's plan (core.definition.description.plan.build_plan, core.definition.description.run.run_plan).
        object.__setattr__(self, "_checks", check_run(self.target, self.slices, workload=self.workload,
                                                      sizing=self.sizing, checkpointing=self.checkpointing,
                                                      customization=self.customization))

    @property
    def checks(self) -> RunChecks:
        """What the cross-section rules computed when this description was validated (core.definition.description.run_checks)."""
        return self._checks  # type: ignore[attr-defined]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RunConfig":
        """The one dict-to-spec function of a run description (`mtc plan`, the DAG form, `mtc run`)."""
        if not isinstance(data, Mapping):
            raise SpecError("config", type(data).__name__, "a mapping with sections slices, checkpointing, workload")
        _reject_unknown("config", data, {f.name for f in dataclasses.fields(cls)})
        rules_for(data.get("target", "gke"))  # an unknown kind first, before the sections it would judge
        for section in ("slices", "checkpointing", "workload"):
            require(section in data, section, None, f"a '{section}' section")
        kwargs = {name: (spec_from_dict(SECTIONS[name], name, value) if name in SECTIONS else value)
                  for name, value in data.items() if value is not None or name not in SECTIONS}
        if isinstance(kwargs.get("fault_plan"), list):
            kwargs["fault_plan"] = tuple(kwargs["fault_plan"])
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """The one spec-to-dict function: every field explicit, JSON-serializable; from_dict(to_dict()) == self."""
        return spec_to_dict(self)


def bucket_of(url: str) -> str:
    """The bucket of a gs:// URL."""
    return url[len("gs://"):].split("/", 1)[0]


SECTIONS: dict[str, type] = {"slices": SliceSpec, "checkpointing": CheckpointingSpec, "workload": WorkloadSpec,
                             "cluster": ClusterSpec, "bucket": BucketSpec, "sizing": SizingSpec,
                             "customization": CustomizationSpec}


def _reject_unknown(section: str, data: Mapping[str, Any], known: set[str]) -> None:
    for key in data:
        if key not in known:
            raise SpecError(f"{section}.{key}", data[key], f"one of the known keys: {', '.join(sorted(known))}")


def spec_from_dict(kind: type, section: str, value: Any) -> Any:
    """The one dict-to-spec function for a section (a spec passes through): unknown and missing keys are refused
    naming the field; the spec's own __post_init__ validates the values."""
    if isinstance(value, kind):
        return value
    if hasattr(kind, "from_value"):  # the customization section validates its nested parts itself
        return kind.from_value(value, section)
    if not isinstance(value, Mapping):
        raise SpecError(section, value, f"a mapping of {kind.__name__} fields")
    _reject_unknown(section, value, {f.name for f in dataclasses.fields(kind)})
    missing = [f.name for f in dataclasses.fields(kind) if f.name not in value
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise SpecError(f"{section}.{missing[0]}", None, "a value (required)")
    return kind(**dict(value))


def spec_to_dict(spec: Any) -> Any:
    """The one spec-to-dict function: dataclasses become dicts, tuples lists (JSON, XCom and YAML alike)."""
    if dataclasses.is_dataclass(spec) and not isinstance(spec, type):
        return {f.name: spec_to_dict(getattr(spec, f.name)) for f in dataclasses.fields(spec)}
    if isinstance(spec, Mapping):
        return {key: spec_to_dict(value) for key, value in spec.items()}
    if isinstance(spec, (list, tuple)):
        return [spec_to_dict(value) for value in spec]
    return spec
