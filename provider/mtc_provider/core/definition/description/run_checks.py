"""The checks of a run description that span its sections, in one place for every entry point.

`mtc plan` (RunConfig), the sample DAGs' trigger forms (core.definition.description.params) and every operator that takes slices
(CheckpointConfiguration, readiness, the JobSet launch) call `check_run` with what they have, before any side
effect: the GKE Multislice rule for the target, the names JobSet's webhook derives, and the ramdisk against the
host's memory with the guide's buffer rule; emergency checkpointing's replicas (Orbax) and the grace period Spot
capacity can give (GKE).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.definition.description.field_rules import check_override_targets
from mtc_provider.core.definition.description.jobset_names import check_jobset_names
from mtc_provider.core.definition.render.graceful_exit import IN_CLUSTER as GRACEFUL_IN_CLUSTER
from mtc_provider.core.definition.shape.sizing import RamdiskSize, check_fits_host
from mtc_provider.core.definition.shape.slice_placement import check_slice_placement
from mtc_provider.core.definition.shape.tpu import SliceSpec, check_multislice

if TYPE_CHECKING:  # spec imports this module: only the types here
    from mtc_provider.core.definition.render.customization import CustomizationSpec
    from mtc_provider.core.definition.description.spec import CheckpointingSpec, SizingSpec, WorkloadSpec

# Orbax's emergency CheckpointManager (orbax/checkpoint/experimental/emergency/checkpoint_manager.py) raises
# "To use this CheckpointManager, at least 2 data-parallel replicas are needed." when the mesh's replica axis has
# fewer: one replica writes the persistent tier, the others the local one.
MIN_EMERGENCY_REPLICAS = 2
DCN_AXIS_RE = re.compile(r"^dcn_[a-z_]+_parallelism$")
DCN_DATA = "dcn_data_parallelism"
# GKE "Spot VMs" / graceful node shutdown: a preempted Spot VM stops 30 s after the notice, and the kubelet gives
# non-system pods at most the first 15 s of it (best effort): a longer grace period is not given.
SPOT_GRACE_S = 15


@dataclass(frozen=True)
class RunChecks:
    """What the checks computed: the ramdisk per host (when sizing was given) and warnings to show."""

    ramdisk: RamdiskSize | None = None
    warnings: tuple[str, ...] = field(default=())


def check_run(target: str, slices: SliceSpec, *, workload: WorkloadSpec | None = None,
              sizing: SizingSpec | None = None, jobset_name_field: str = "workload.jobset_name",
              attempts: bool = True, checkpointing: CheckpointingSpec | None = None,
              customization: CustomizationSpec | None = None) -> RunChecks:
    """Raise SpecError (field, value, what is allowed) for the first rule the run breaks; else the ramdisk.

    `attempts`: the JobSet name is checked as the launch operator submits it (`<name>-<5 hex>-a<attempt>`)."""
    check_multislice(slices, target)
    if customization is not None:
        check_slice_placement(customization, slices.num_slices)
    warnings: list[str] = []
    if workload is not None:
        check_jobset_names(workload.jobset_name, workload.replicated_job_name, slices.num_slices,
                           slices.hosts_per_slice, jobset_name_field, attempts)
        if checkpointing is not None and checkpointing.local_tier:
            check_emergency_replicas(checkpointing.local_tier, slices.num_slices, workload.extra_flags or {})
        warnings.extend(graceful_in_cluster_warning(workload.graceful_preemption))
        if customization is not None:
            warnings.extend(spot_grace_warning(customization.capacity, workload.termination_grace_period_seconds))
            check_override_targets("customization.jobset_override", customization.jobset_override,
                                   [workload.replicated_job_name])
    if sizing is None:
        return RunChecks(None, tuple(warnings))
    size = sizing.size(slices.hosts_per_slice)
    warning = check_fits_host(size, slices.machine_type, slices.host_memory_bytes,
                              allow_above_allocatable=sizing.allow_ramdisk_above_allocatable)
    return RunChecks(size, (warning, *warnings) if warning else tuple(warnings))


def data_parallel_replicas(num_slices: int, extra_flags: Mapping[str, Any]) -> int | None:
    """The data-parallel replicas across slices MaxText's mesh gets: `dcn_data_parallelism`, its -1 (the default)
    filling what the other `dcn_*_parallelism` axes leave of the slices; None when the flags do not say (not ints,
    or an `ici_data_parallelism` other than 1 that adds replicas within a slice)."""
    axes = {key: value for key, value in extra_flags.items() if DCN_AXIS_RE.match(str(key))}
    if any(isinstance(v, bool) or not isinstance(v, int) for v in axes.values()):
        return None  # MaxText refuses those itself; this rule only reads what it can
    ici = extra_flags.get("ici_data_parallelism", 1)
    if ici != 1:
        return None
    data = axes.get(DCN_DATA, -1)
    if data > 0:
        return data
    others = math.prod(v for k, v in axes.items() if k != DCN_DATA and v > 0)
    return num_slices // others if others and num_slices % others == 0 else None


def check_emergency_replicas(local_tier: str, num_slices: int, extra_flags: Mapping[str, Any]) -> None:
    replicas = data_parallel_replicas(num_slices, extra_flags)
    if replicas is not None and replicas < MIN_EMERGENCY_REPLICAS:
        value = extra_flags.get(DCN_DATA, -1)
        raise SpecError(f"workload.extra_flags.{DCN_DATA}", value,
                        f"at least {MIN_EMERGENCY_REPLICAS} data-parallel replicas across the {num_slices} slices when "
                        f"{local_tier} is on (this gives {replicas}; Orbax's emergency CheckpointManager: 'at least 2 "
                        "data-parallel replicas are needed'): leave dcn_data_parallelism at -1 and the other "
                        "dcn_*_parallelism axes at 1, or turn the local tier off")


def spot_grace_warning(capacity: str, grace_s: int) -> tuple[str, ...]:
    if capacity != "spot" or grace_s <= SPOT_GRACE_S:
        return ()
    return (f"workload.termination_grace_period_seconds is {grace_s} s but customization.capacity is spot: a "
            f"preempted Spot VM stops 30 s after its notice and GKE gives the pods at most {SPOT_GRACE_S} s of it "
            "(graceful node shutdown, best effort; GKE \"Spot VMs\"), so a save after SIGTERM longer than that is "
            "cut off: keep local checkpoints frequent (the emergency tier restores what SIGTERM could not save)",)


def graceful_in_cluster_warning(graceful_preemption: str) -> tuple[str, ...]:
    """In the cluster, a graceful preemption no longer ends the attempt, and the run's budget is judged at an
    attempt's end (core.attempt.attempt_records.end_of_attempt): say what that leaves out."""
    if graceful_preemption != GRACEFUL_IN_CLUSTER:
        return ()
    return ("workload.graceful_preemption is in_cluster: a graceful preemption restarts the JobSet in the same "
            "attempt, and the run's budget (budget_interruptions, min_steps_per_interruption, min_goodput) is judged "
            "only when an attempt ends (its target, a stall, maxRestarts used up by host losses), so a run preempted "
            "about as often as it saves is not ended by it as it is with operator; the image needs python3 (the "
            "wrapper that maps the exit: docs/resubmission.md)",)
