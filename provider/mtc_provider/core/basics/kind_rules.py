"""What the run description's rules are on one target kind (pure): a kind's `KindRules` is part of its registry
record (`targets.registry.TargetKind.rules`), so core asks the registry instead of naming kinds.

The defaults are a cluster reached through the Kubernetes API whose workload runs an image and checkpoints to a GCS
bucket (the kubernetes kind's rules); a kind says where it differs. `rules_for(kind)` is the only way core reads
them; the registry is imported when first asked (core stays importable on its own, tests/core/test_purity.py), and
an unknown kind is the registry's error (field `target.kind`, the value, the registered kinds, the install line).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from mtc_provider.core.basics.vocabulary import DEFAULT_POLL_INTERVAL_S

# (fault_plan, num_slices, hosts_per_slice, steps) -> the checked plan (SpecError names the bad field).
FaultPlanCheck = Callable[[Any, int, int, int], list]
# (RunConfig, local_home, gcp_conn_id) -> the target dict's fields besides `kind` (mtc_provider.target).
TargetFields = Callable[[Any, str, str], dict]


def _namespace_only(config: Any, local_home: str, gcp_conn_id: str) -> dict[str, Any]:
    return {"namespace": config.workload.namespace}


@dataclass(frozen=True)
class KindRules:
    """One kind's rules for the run description, the plan and the watch.

    :param local_processes: the workload runs as this machine's processes (the rehearsal): checkpoints in a local
        folder (the home's buckets/<bucket.name> by default), no image, step events read from files, the local
        workload's extra flags, single-host slices, the local stall floor and start-up budget, and a plan that says
        which cluster steps do not apply. False: an image, a GCS bucket section and gs:// checkpoints.
    :param node_pools: slices are GKE TPU node pools (GKE's Multislice rule; the form's node locations).
    :param cluster_required: the run description needs a cluster section (project_id, location, name).
    :param connection_field: a run description field that must name the cluster's Airflow connection, or None.
    :param poll_interval: seconds between JobSet status checks when the description leaves it out.
    :param termination_grace_period_seconds: the pods' grace period when the description leaves it out.
    :param workloads: the commands the kind runs, by name (the first is the default); empty: any image's command.
    :param check_fault_plan: the fault-plan validator of a kind that injects faults; None: fault_plan must be empty.
    :param target_fields: the target dict's fields (besides kind) the training DAG's tasks take.
    :param plan_checks: (the cluster checks) -> (the checks this kind can make, the ones it cannot see, each as a
        line), for a cluster plan; None: every check applies.
    """

    local_processes: bool = False
    node_pools: bool = False
    cluster_required: bool = False
    connection_field: str | None = None
    poll_interval: float = DEFAULT_POLL_INTERVAL_S
    termination_grace_period_seconds: int = 300
    workloads: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    check_fault_plan: FaultPlanCheck | None = None
    target_fields: TargetFields = _namespace_only
    plan_checks: Callable[[tuple], tuple[tuple, tuple[str, ...]]] | None = None

    @property
    def default_command(self) -> tuple[str, ...] | None:
        return next(iter(self.workloads.values()), None)


def no_faults_on(kind: Any) -> str:
    """What a `fault_plan` may be on a kind that injects no faults (the run description's and the operator's error)."""
    return f"empty on the {kind} target (fault_plan needs the local target, which injects faults)"


def rules_for(kind: Any) -> KindRules:
    """The registered kind's rules; SpecError (`target.kind`) for a kind no installed distribution registers."""
    from mtc_provider.targets.registry import kind_of  # the registry owns the kinds (a lazy, one-way look-up)

    return kind_of(kind).rules
