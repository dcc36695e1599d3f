"""The checks of a run description that span its sections, in one place for every entry point.

`mtc plan` (RunConfig), the sample DAGs' trigger forms (core.params) and every operator that takes slices
(CheckpointConfiguration, readiness, the JobSet launch) call `check_run` with what they have, before any side
effect: the GKE Multislice rule for the target, the names JobSet's webhook derives, and the ramdisk against the
host's memory with the guide's buffer rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mtc_provider.core.jobset_names import check_jobset_names
from mtc_provider.core.sizing import RamdiskSize, check_fits_host
from mtc_provider.core.tpu import SliceSpec, check_multislice

if TYPE_CHECKING:  # spec imports this module: only the types here
    from mtc_provider.core.spec import SizingSpec, WorkloadSpec


@dataclass(frozen=True)
class RunChecks:
    """What the checks computed: the ramdisk per host (when sizing was given) and warnings to show."""

    ramdisk: RamdiskSize | None = None
    warnings: tuple[str, ...] = field(default=())


def check_run(target: str, slices: SliceSpec, *, workload: WorkloadSpec | None = None,
              sizing: SizingSpec | None = None, jobset_name_field: str = "workload.jobset_name",
              attempts: bool = True) -> RunChecks:
    """Raise SpecError (field, value, what is allowed) for the first rule the run breaks; else the ramdisk.

    `attempts`: the JobSet name is checked as the launch operator submits it (`<name>-<5 hex>-a<attempt>`)."""
    check_multislice(slices, target)
    if workload is not None:
        check_jobset_names(workload.jobset_name, workload.replicated_job_name, slices.num_slices,
                           slices.hosts_per_slice, jobset_name_field, attempts)
    if sizing is None:
        return RunChecks()
    size = sizing.size(slices.hosts_per_slice)
    warning = check_fits_host(size, slices.machine_type, slices.host_memory_bytes)
    return RunChecks(size, (warning,) if warning else ())
