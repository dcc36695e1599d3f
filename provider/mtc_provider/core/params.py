"""From a training DAG's params (the trigger form) to the specs every task of the DAG uses (pure).

The form is flat, as a person fills it; the result is the validated run description, split into the
plain dicts each operator takes. Everything is validated here, before any task touches a cluster.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from mtc_provider.core.customization import CustomizationSpec
from mtc_provider.core.errors import SpecError, require
from mtc_provider.core.locations import check_bucket_name
from mtc_provider.core.maxtext import (
    DEFAULT_LAYOUT,
    FLAG_KEY_RE,
    check_target_mode,
    container_command,
    last_step,
    render_value,
)
from mtc_provider.core.names import (
    check_checkpoint_configuration_name,
    check_dns1123_label,
    check_namespace,
    check_service_account,
)
from mtc_provider.core.run_checks import check_run
from mtc_provider.core.spec import (
    IMAGE_RE,
    LOCAL_IMAGE,
    BucketSpec,
    CheckpointingSpec,
    ClusterSpec,
    SizingSpec,
    WorkloadSpec,
)
from mtc_provider.core.tpu import SliceSpec, default_topology
from mtc_provider.core.fault_fields import check_extras
from mtc_provider.core.vocabulary import FAULT_KIND_NAMES as FAULT_KINDS, HOST_FAULT_KINDS as HOST_FAULTS
from mtc_provider.core.vocabulary import START_FAULT_KINDS

CHECKPOINT_FLAGS = tuple(
    f.name for f in dataclasses.fields(CheckpointingSpec) if f.name not in ("run_name", "base_output_directory", "steps")
)
TARGET_KINDS = ("local", "gke", "kubernetes")
LOCAL_WORKLOAD_COMMAND = ("python", "-m", "mtc_local.workload")
# The local target's workloads: the JAX/Orbax one, or the light one (no JAX; for load tests only).
LOCAL_WORKLOADS = {"full": LOCAL_WORKLOAD_COMMAND, "light": ("python", "-m", "mtc_local.light_workload")}
# Model settings the local workload takes (mtc_local.workload.FLAG_SPECS); on GKE any MaxText key.
LOCAL_MODEL_FLAGS = ("model_dim", "global_batch_size", "learning_rate")
MIN_POLL_INTERVAL_S = 1.0  # below this a watch or listing loop only loads the API server and the bucket


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


def check_conf_keys(conf: Mapping[str, Any] | None, declared: Any) -> None:
    """A trigger may set only the DAG's declared params: connections, service accounts and commands come from
    the DAG author, never from `dag_run.conf`."""
    allowed = sorted(declared)
    for key, value in (conf or {}).items():
        if key not in allowed:
            raise SpecError(f"dag_run.conf.{key}", value, f"one of the DAG's params: {', '.join(allowed)}")


def check_poll_interval(value: Any, field: str = "poll_interval") -> float:
    require(
        isinstance(value, (int, float)) and not isinstance(value, bool) and value >= MIN_POLL_INTERVAL_S,
        field,
        value,
        f"a number of seconds >= {MIN_POLL_INTERVAL_S:g}",
    )
    return float(value)


def _fault_plan(raw: Any, slices: SliceSpec, steps: int) -> list[dict[str, Any]]:
    """The local fault plan, checked against the run's shape and length before anything starts."""
    require(isinstance(raw, list), "params.fault_plan", raw, "a list of faults like {kind, at_step, slice, host}")
    for i, fault in enumerate(raw):
        where = f"params.fault_plan[{i}]"
        require(isinstance(fault, Mapping), where, fault, "a mapping with kind and at_step")
        require(fault.get("kind") in FAULT_KINDS, f"{where}.kind", fault.get("kind"), ", ".join(FAULT_KINDS))
        check_extras(fault, where)
        require("at_step" in fault or "at_seconds" in fault or fault["kind"] in START_FAULT_KINDS, where, fault,
                "a fault with at_step or at_seconds")
        if "at_step" in fault:
            step = fault["at_step"]
            require(isinstance(step, int) and not isinstance(step, bool) and 0 <= step < steps, f"{where}.at_step",
                    step, f"an integer from 0 to {steps - 1} (below steps: a fault at or after the last step "
                    "never fires)")
        if "slice" in fault:
            index = fault["slice"]
            require(isinstance(index, int) and not isinstance(index, bool) and 0 <= index < slices.num_slices,
                    f"{where}.slice", index, f"a slice index from 0 to {slices.num_slices - 1}")
        if "host" in fault:
            host = fault["host"]
            require(fault["kind"] in HOST_FAULTS, f"{where}.host", host,
                    f"no host for {fault['kind']} (it acts on a whole slice); a host only for {', '.join(HOST_FAULTS)}")
            require(isinstance(host, int) and not isinstance(host, bool) and 0 <= host < slices.hosts_per_slice,
                    f"{where}.host", host, f"a host index from 0 to {slices.hosts_per_slice - 1} "
                    f"({slices.hosts_per_slice} hosts per slice)")
    return [dict(fault) for fault in raw]


def _image(params: Mapping[str, Any], target_kind: str, needs_image: bool) -> str:
    image = _get(params, "image", LOCAL_IMAGE) or LOCAL_IMAGE
    if target_kind == "local" or not needs_image:
        return LOCAL_IMAGE
    require(
        isinstance(image, str) and image != LOCAL_IMAGE and bool(IMAGE_RE.match(image)),
        "params.image",
        image,
        "a container image with MaxText for the gke target, e.g. us-docker.pkg.dev/PROJECT/REPO/maxtext:TAG "
        f"(not the local placeholder {LOCAL_IMAGE!r})",
    )
    return image


def _model_flags(params: Mapping[str, Any], target_kind: str, taken: set[str]) -> dict[str, Any]:
    raw = _get(params, "model_flags", {})
    require(isinstance(raw, Mapping), "params.model_flags", raw, "a mapping of MaxText flags, e.g. {model_name: llama2-7b}")
    flags: dict[str, Any] = {}
    for key, value in raw.items():
        field = f"params.model_flags.{key}"
        require(isinstance(key, str) and bool(FLAG_KEY_RE.match(key)), field, key,
                "a MaxText config key: letters, digits and '_', not starting with a digit")
        require(key not in taken, field, value,
                f"a flag other than the ones the form sets ({', '.join(sorted(taken))}): use that field")
        if target_kind == "local":
            require(key in LOCAL_MODEL_FLAGS, field, value,
                    f"on the local target one of {', '.join(LOCAL_MODEL_FLAGS)} (the local workload's model settings)")
        render_value(value, field)  # a scalar MaxText can parse
        flags[key] = value
    return flags


def training_run(
    params: Mapping[str, Any],
    local_home: str,
    *,
    gcp_conn_id: str = "google_cloud_default",
    service_account: str = "default",
    command: tuple[str, ...] | None = None,
    needs_image: bool = True,
) -> dict[str, Any]:
    """Validate the form and return the dicts the training DAG's tasks take (all JSON-serializable).

    The connection, the Kubernetes service account and the GKE command are the DAG author's (arguments), never
    the form's. `needs_image=False` for DAGs that launch no training container (cluster setup)."""
    target_kind = _get(params, "target", "local")
    require(target_kind in TARGET_KINDS, "params.target", target_kind, " or ".join(TARGET_KINDS))
    namespace = check_namespace(_get(params, "namespace", "default"), "params.namespace")
    run_name = _get(params, "run_name", "")
    bucket = check_bucket_name(_get(params, "bucket", "mtc-checkpoints"))  # locally a folder name: no '..'
    tpu_type, machine_type = _get(params, "tpu_type", "v6e"), _get(params, "machine_type", "")
    slices = SliceSpec(
        tpu_type=tpu_type,
        # Empty: the smallest slice the target takes (one host; on gke multi-host, GKE's Multislice rule).
        topology=_get(params, "topology", "") or default_topology(tpu_type, machine_type, target_kind),
        num_slices=_int(params, "num_slices", 2),
        machine_type=machine_type,
    )
    if target_kind == "gke":
        BucketSpec(name=bucket, location=_get(params, "bucket_location", "us-central1"))
        for key in ("project_id", "location", "cluster_name"):
            require(bool(_get(params, key, "")), f"params.{key}", _get(params, key, ""), "a value on the gke target")
        ClusterSpec(project_id=params["project_id"], location=params["location"], name=params["cluster_name"])
        base = f"gs://{bucket}"
        target: dict[str, Any] = {
            "kind": "gke",
            "project_id": params["project_id"],
            "location": params["location"],
            "cluster_name": params["cluster_name"],
            "namespace": namespace,
            "gcp_conn_id": gcp_conn_id,
        }
    elif target_kind == "kubernetes":  # any cluster with JobSet, through an Airflow Kubernetes connection
        location = _get(params, "bucket_location", "us-central1")
        BucketSpec(name=bucket, location=location)
        connection = _get(params, "kubernetes_conn_id", "kubernetes_default")
        require(bool(connection), "params.kubernetes_conn_id", connection, "an Airflow Kubernetes connection id")
        base = f"gs://{bucket}"
        target = {"kind": "kubernetes", "kubernetes_conn_id": connection, "namespace": namespace,
                  "gcp_conn_id": gcp_conn_id, "project_id": _get(params, "project_id", "") or None,
                  "location": location}
    else:
        base = f"{local_home.rstrip('/')}/buckets/{bucket}"
        target = {"kind": "local", "home": local_home, "namespace": namespace}
    flags = {name: params[name] for name in CHECKPOINT_FLAGS if params.get(name) is not None}
    for name in ("local_checkpoint_period", "checkpoint_period", "multi_tier_checkpointing_backup_interval_minutes",
                 "multi_tier_checkpointing_backup_interval_steps"):
        if name in flags:
            flags[name] = _int(params, name, 0)
    steps = _int(params, "steps", 1)
    checkpointing = CheckpointingSpec(run_name=run_name, base_output_directory=base, steps=steps, **flags)
    check_target_mode(target_kind, checkpointing)
    extra_flags: dict[str, Any] = {}
    if target_kind == "local":
        extra_flags["step_time_ms"] = _int(params, "step_time_ms", 0)
        extra_flags["seed"] = _int(params, "seed", 0)
        # The workload's own watchdog: a survivor of a dead or frozen peer exits (retryable) after this long.
        extra_flags["distributed_timeout_s"] = _int(params, "distributed_timeout_s", 60)
    taken = set(checkpointing.maxtext_flags()) | set(extra_flags)
    extra_flags.update(_model_flags(params, target_kind, taken))
    local_workload = _get(params, "local_workload", "full")
    require(local_workload in LOCAL_WORKLOADS and (target_kind == "local" or local_workload == "full"),
            "params.local_workload", local_workload,
            "full (the JAX workload) or light (no JAX, load tests) on the local target; full on gke")
    workload = WorkloadSpec(
        jobset_name=run_name[:40].rstrip("-"),
        image=_image(params, target_kind, needs_image),
        command=LOCAL_WORKLOADS[local_workload] if target_kind == "local" else command,  # None: the layout's trainer
        maxtext_layout=_get(params, "maxtext_layout", DEFAULT_LAYOUT),
        extra_flags=extra_flags,
        namespace=namespace,
        service_account=service_account,
        max_restarts=_int(params, "max_restarts", 3),
        termination_grace_period_seconds=_int(params, "termination_grace_period_seconds", 60 if target_kind == "local" else 300),
    )
    container_command(checkpointing, workload)  # cross-section rules (layout vs flags) fail here, at plan time
    sizing = SizingSpec(parameters=float(_get(params, "parameters", 1e9)))
    # The JobSet is named after the run: a name JobSet's webhook would refuse is the run name's fault.
    checked = check_run(target_kind, slices, workload=workload, sizing=sizing, jobset_name_field="params.run_name")
    size = checked.ramdisk
    assert size is not None  # sizing was given
    fault_plan = _fault_plan(_get(params, "fault_plan", []), slices, steps) if target_kind == "local" else []
    # Seconds locally; on GKE a JobSet changes over minutes and every poll is an API call.
    poll_interval = check_poll_interval(_get(params, "poll_interval", 2.0 if target_kind == "local" else 30.0),
                                        "params.poll_interval")
    run_dir = f"{base}/{run_name}"
    return {
        "target": target,
        "namespace": namespace,
        "slices": dataclasses.asdict(slices),
        "checkpointing": dataclasses.asdict(checkpointing),
        "workload": {**dataclasses.asdict(workload), "command": list(workload.command)},
        "sizing": dataclasses.asdict(sizing),
        "ramdisk": size.quantity,
        "warnings": list(checked.warnings),
        "checkpoint_dir": checkpointing.checkpoint_directory,
        "target_step": last_step(checkpointing, workload),  # MaxText's last checkpoint is steps - 1
        "events_dir": f"{run_dir}/events" if target_kind == "local" else None,
        "chart_path": f"{run_dir}/goodput.png" if target_kind == "local" else None,
        "fault_plan": fault_plan,
        "poll_interval": poll_interval,
        # Kueue, capacity, volumes, Secret/ConfigMap env, /dev/shm, overrides: validated here, applied at submission.
        "customization": dataclasses.asdict(CustomizationSpec.from_value(_get(params, "customization", {}),
                                                                          "params.customization")),
    }


def cluster_setup_run(params: Mapping[str, Any], local_home: str, *, service_account: str = "default") -> dict[str, Any]:
    """The cluster-setup DAG's plan: the training run's checks plus every name the setup creates or binds,
    so nothing is created before a bad name is found. `service_account` is the DAG author's workload KSA (the
    one the training DAG's pods run as), never the form's."""
    from mtc_provider.core.node_pools import node_locations
    from mtc_provider.core.readiness import setup_fixable

    run = training_run(params, local_home, needs_image=False,  # the setup launches no training container
                       service_account=service_account)
    names = {
        "checkpoint_configuration_name": check_checkpoint_configuration_name(
            _get(params, "checkpoint_configuration_name", "mtc-checkpoint-config"),
            "params.checkpoint_configuration_name"),
        "service_account": check_service_account(service_account, "service_account"),
        # Pools are named <prefix>-<slice index>; GKE allows 40 characters.
        "node_pool_prefix": check_dns1123_label("params.node_pool_prefix", _get(params, "node_pool_prefix", "mtc-slice"),
                                                36),
    }
    BucketSpec(name=_get(params, "bucket", "mtc-checkpoints"), location=_get(params, "bucket_location", "us-central1"))
    zones: list[str] = []
    tpu_zone = _get(params, "tpu_zone", "")
    if run["target"]["kind"] == "gke" and (tpu_zone or _get(params, "create_node_pools", False)):
        # The guide's --node-locations=${TPU_ZONE}: a regional cluster without it is refused here.
        zones = node_locations(params["location"], [tpu_zone] if tpu_zone else None, "params.tpu_zone")
    return {**run, **names, "node_locations": zones,
            "fixed_by_later_tasks": setup_fixable(params) if run["target"]["kind"] == "gke" else []}
