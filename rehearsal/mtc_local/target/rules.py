"""The local kind's rules for the run description (core.basics.kind_rules, reached through the registry): the workload
runs as this machine's processes (the JAX/Orbax workload, or the light one for load tests), checkpoints go to the
home's folders, polls are seconds apart, and faults are injected (mtc_local.faults.plan validates the plan)."""

from __future__ import annotations

from typing import Any

from mtc_provider.core.basics.kind_rules import KindRules

LOCAL_WORKLOAD_COMMAND = ("python", "-m", "mtc_local.workload")
# The local target's workloads: the JAX/Orbax one, or the light one (no JAX; for load tests only).
LOCAL_WORKLOADS = {"full": LOCAL_WORKLOAD_COMMAND, "light": ("python", "-m", "mtc_local.light_workload")}


def check_fault_plan(plan: Any, num_slices: int, hosts_per_slice: int, steps: int) -> list:
    from mtc_local.faults.plan import check_fault_plan as check  # imported when a run description is checked

    return check(plan, num_slices, hosts_per_slice, steps)


def target_fields(config: Any, local_home: str, gcp_conn_id: str) -> dict[str, Any]:
    return {"home": local_home, "namespace": config.workload.namespace}


RULES = KindRules(local_processes=True, poll_interval=2.0, termination_grace_period_seconds=60,
                  workloads=LOCAL_WORKLOADS, check_fault_plan=check_fault_plan, target_fields=target_fields)
