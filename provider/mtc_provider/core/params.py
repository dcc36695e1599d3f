"""From a training DAG's params (the trigger form) to the specs every task of the DAG uses (pure).

The form is flat, as a person fills it; the result is the validated run description, split into the
plain dicts each operator takes. Everything is validated here, before any task touches a cluster.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from mtc_provider.core.customization import CustomizationSpec
from mtc_provider.core.errors import SpecError, require
from mtc_provider.core.sizing import ramdisk_size
from mtc_provider.core.spec import MAXTEXT_COMMAND, BucketSpec, CheckpointingSpec, SizingSpec, WorkloadSpec
from mtc_provider.core.tpu import SliceSpec

CHECKPOINT_FLAGS = tuple(
    f.name for f in dataclasses.fields(CheckpointingSpec) if f.name not in ("run_name", "base_output_directory", "steps")
)
LOCAL_WORKLOAD_COMMAND = ("python", "-m", "mtc_provider.local.workload")
FAULT_KINDS = ("sigkill_host", "sigterm_slice", "wipe_ramdisk", "kill_slice", "hang")


def _get(params: Mapping[str, Any], key: str, default: Any = None) -> Any:
    value = params.get(key, default)
    return default if value is None else value


def _int(params: Mapping[str, Any], key: str, default: int) -> int:
    value = _get(params, key, default)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"params.{key}", value, "an integer")
    return value


def _fault_plan(raw: Any) -> list[dict[str, Any]]:
    require(isinstance(raw, list), "params.fault_plan", raw, "a list of faults like {kind, at_step, slice, host}")
    for i, fault in enumerate(raw):
        require(isinstance(fault, Mapping), f"params.fault_plan[{i}]", fault, "a mapping with kind and at_step")
        require(fault.get("kind") in FAULT_KINDS, f"params.fault_plan[{i}].kind", fault.get("kind"),
                ", ".join(FAULT_KINDS))
        require("at_step" in fault or "at_seconds" in fault, f"params.fault_plan[{i}]", fault,
                "a fault with at_step or at_seconds")
    return [dict(fault) for fault in raw]


def training_run(params: Mapping[str, Any], local_home: str) -> dict[str, Any]:
    """Validate the form and return the dicts the training DAG's tasks take (all JSON-serializable)."""
    target_kind = _get(params, "target", "local")
    require(target_kind in ("local", "gke"), "params.target", target_kind, "local or gke")
    namespace = _get(params, "namespace", "default")
    run_name = _get(params, "run_name", "")
    bucket = _get(params, "bucket", "mtc-checkpoints")
    slices = SliceSpec(
        tpu_type=_get(params, "tpu_type", "v6e"),
        topology=_get(params, "topology", "2x2"),
        num_slices=_int(params, "num_slices", 2),
        machine_type=_get(params, "machine_type", ""),
    )
    if target_kind == "gke":
        BucketSpec(name=bucket, location=_get(params, "bucket_location", "us-central1"))
        for key in ("project_id", "location", "cluster_name"):
            require(bool(_get(params, key, "")), f"params.{key}", _get(params, key, ""), "a value on the gke target")
        base = f"gs://{bucket}"
        target: dict[str, Any] = {
            "kind": "gke",
            "project_id": params["project_id"],
            "location": params["location"],
            "cluster_name": params["cluster_name"],
            "namespace": namespace,
            "gcp_conn_id": _get(params, "gcp_conn_id", "google_cloud_default"),
        }
    else:
        base = f"{local_home.rstrip('/')}/buckets/{bucket}"
        target = {"kind": "local", "home": local_home, "namespace": namespace}
    flags = {name: params[name] for name in CHECKPOINT_FLAGS if params.get(name) is not None}
    for name in ("local_checkpoint_period", "checkpoint_period"):
        if name in flags:
            flags[name] = _int(params, name, 0)
    checkpointing = CheckpointingSpec(run_name=run_name, base_output_directory=base, steps=_int(params, "steps", 1),
                                      **flags)
    extra_flags: dict[str, Any] = {}
    if target_kind == "local":
        extra_flags["step_time_ms"] = _int(params, "step_time_ms", 0)
        extra_flags["seed"] = _int(params, "seed", 0)
        # The workload's own watchdog: a survivor of a dead or frozen peer exits (retryable) after this long.
        extra_flags["distributed_timeout_s"] = _int(params, "distributed_timeout_s", 60)
    workload = WorkloadSpec(
        jobset_name=run_name[:40].rstrip("-"),
        image=_get(params, "image", "local") or "local",
        command=LOCAL_WORKLOAD_COMMAND if target_kind == "local" else tuple(_get(params, "command", MAXTEXT_COMMAND)),
        extra_flags=extra_flags,
        namespace=namespace,
        service_account=_get(params, "service_account", "default"),
        max_restarts=_int(params, "max_restarts", 3),
        termination_grace_period_seconds=_int(params, "termination_grace_period_seconds", 60 if target_kind == "local" else 300),
    )
    sizing = SizingSpec(parameters=float(_get(params, "parameters", 1e9)))
    size = ramdisk_size(sizing.parameters, slices.hosts_per_slice)
    fault_plan = _fault_plan(_get(params, "fault_plan", [])) if target_kind == "local" else []
    run_dir = f"{base}/{run_name}"
    return {
        "target": target,
        "namespace": namespace,
        "slices": dataclasses.asdict(slices),
        "checkpointing": dataclasses.asdict(checkpointing),
        "workload": {**dataclasses.asdict(workload), "command": list(workload.command)},
        "sizing": dataclasses.asdict(sizing),
        "ramdisk": size.quantity,
        "checkpoint_dir": checkpointing.checkpoint_directory,
        "events_dir": f"{run_dir}/events" if target_kind == "local" else None,
        "chart_path": f"{run_dir}/goodput.png" if target_kind == "local" else None,
        "fault_plan": fault_plan,
        # Kueue, capacity, volumes, Secret/ConfigMap env, /dev/shm, overrides: validated here, applied at submission.
        "customization": dataclasses.asdict(CustomizationSpec.from_value(_get(params, "customization", {}),
                                                                          "params.customization")),
    }
