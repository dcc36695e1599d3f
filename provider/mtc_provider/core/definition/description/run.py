"""The one run description (pure): parsed and validated once, whether it comes from the training DAG's form,
the `mtc` YAML (`mtc plan`/`mtc render`/`mtc run`) or operator arguments.

The description has the YAML's sections (target, cluster, bucket, slices, sizing, checkpointing, workload,
customization, kubernetes_conn_id, poll_interval, stall_timeout, startup_timeout, fault_plan); the DAG's form has
the same sections.
`parse_run` fills what the target decides when a value is left out (`complete`: every target-dependent default is
written here, once), then `RunConfig.from_dict` validates. `run_plan` turns the validated description into the
plain dicts the training DAG's tasks take.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

from mtc_provider.core.basics.errors import SpecError, require
from mtc_provider.core.definition.render.flag_table import LOCAL_MODEL_FLAGS, LOCAL_RUN_FLAGS
from mtc_provider.core.basics.kind_rules import KindRules, rules_for
from mtc_provider.core.definition.render.maxtext import FLAG_KEY_RE, check_container_flags, last_step, render_value
from mtc_provider.core.definition.description.spec import LOCAL_IMAGE, RunConfig, spec_to_dict
from mtc_provider.core.definition.cluster.startup import startup_budget
from mtc_provider.core.definition.shape.tpu import default_topology

DEFAULT_BUCKET = "mtc-checkpoints"
# What the target decides when the description leaves a value out is its kind's (core.basics.kind_rules: seconds locally;
# on GKE a JobSet changes over minutes, every poll is an API call, and compilation and restore take minutes). The
# stall limit is not a constant: it is derived from the run's cadence (core.measure.cadence), whose floor is the target's.

# Accepted only so that a placeholder can be checked: the cluster-setup DAG launches no training container.
SETUP_IMAGE = "setup.invalid/no-training-container"


def _section(data: dict[str, Any], name: str) -> dict[str, Any]:
    value = data.get(name)
    if value is None:
        value = data[name] = {}
    if not isinstance(value, Mapping):
        raise SpecError(name, value, "a mapping (a section of the run description)")
    data[name] = dict(value)
    return data[name]


def complete(description: Mapping[str, Any], local_home: str | None = None) -> dict[str, Any]:
    """The description with every value the target decides filled in where it was left out (a copy)."""
    if not isinstance(description, Mapping):
        raise SpecError("config", type(description).__name__, "a mapping with sections slices, checkpointing, "
                        "workload")
    data = copy.deepcopy(dict(description))
    target = data.setdefault("target", "gke")
    rules = rules_for(target)  # an unknown kind is refused here, naming target.kind and the registered kinds
    slices, checkpointing, workload = (_section(data, name) for name in ("slices", "checkpointing", "workload"))
    if not slices.get("topology") and isinstance(slices.get("tpu_type"), str):
        # The smallest slice the target takes (one host; on gke multi-host, GKE's Multislice rule).
        slices["topology"] = default_topology(slices["tpu_type"], slices.get("machine_type") or "", rules.node_pools)
    bucket = data.get("bucket") if isinstance(data.get("bucket"), Mapping) else {}
    if not checkpointing.get("base_output_directory"):
        name = bucket.get("name") or DEFAULT_BUCKET
        if rules.local_processes:
            require(bool(local_home), "checkpointing.base_output_directory", None,
                    f"an absolute path on the {target} target (or the local home's buckets/<bucket.name>)")
            checkpointing["base_output_directory"] = f"{str(local_home).rstrip('/')}/buckets/{name}"
        else:
            checkpointing["base_output_directory"] = f"gs://{name}"
    run_name = checkpointing.get("run_name")
    if not workload.get("jobset_name") and isinstance(run_name, str):
        workload["jobset_name"] = run_name[:40].rstrip("-")  # the JobSet is named after the run
    if workload.get("termination_grace_period_seconds") is None:
        workload["termination_grace_period_seconds"] = rules.termination_grace_period_seconds
    if workload.get("command") is None and rules.default_command:
        workload["command"] = list(rules.default_command)
    if rules.check_fault_plan is None:  # the fault-injecting kinds' part is ignored elsewhere: one form, every target
        data["fault_plan"] = []
    if rules.local_processes:
        workload.setdefault("image", LOCAL_IMAGE)
        extra = workload.get("extra_flags")
        if extra is None or isinstance(extra, Mapping):
            workload["extra_flags"] = {**{k: default for k, (_, default) in LOCAL_RUN_FLAGS.items()}, **(extra or {})}
    else:  # the local-only parts are ignored elsewhere, so that one form (or file) serves every target
        extra = workload.get("extra_flags")
        if isinstance(extra, Mapping):
            workload["extra_flags"] = {key: value for key, value in extra.items() if key not in LOCAL_RUN_FLAGS}
    if data.get("poll_interval") is None:
        data["poll_interval"] = rules.poll_interval
    return data  # stall_timeout stays empty when not given: derived from the cadence (stall_rule)


def check_extra_flags(config: RunConfig) -> None:
    """`workload.extra_flags`: MaxText keys (any on gke and kubernetes; the local workload's model and rehearsal
    settings on the local target), each a scalar MaxText can parse."""
    allowed_local = (*LOCAL_MODEL_FLAGS, *LOCAL_RUN_FLAGS)
    local = rules_for(config.target).local_processes
    for key, value in (config.workload.extra_flags or {}).items():
        field = f"workload.extra_flags.{key}"
        require(isinstance(key, str) and bool(FLAG_KEY_RE.match(key)), field, key,
                "a MaxText config key: letters, digits and '_', not starting with a digit")
        if local:
            require(key in allowed_local, field, value,
                    f"on the {config.target} target one of {', '.join(allowed_local)} (the local workload's settings)")
        render_value(value, field)


def parse_run(description: Mapping[str, Any], local_home: str | None = None) -> RunConfig:
    """The one parse and validation of a run description: the target's defaults, then every rule (field, value
    and what is allowed in each error), before any side effect."""
    data = complete(description, local_home)
    try:
        config = RunConfig.from_dict(data)
    except SpecError as err:
        named_after_run = isinstance(description.get("workload"), Mapping) and not description["workload"].get(
            "jobset_name")
        if err.field == "workload.jobset_name" and named_after_run:  # the JobSet is named after the run
            raise SpecError("checkpointing.run_name", data["checkpointing"].get("run_name"), err.allowed) from err
        raise
    check_extra_flags(config)
    _check_workload_command(config, rules_for(config.target))
    check_container_flags(config.checkpointing, config.workload)  # cross-section rules (layout vs flags)
    stall_rule(config)  # an explicit stall_timeout shorter than every signal's gap is refused here
    if config.startup_timeout is None:  # bounded by default: core.definition.cluster.startup's budget for this run
        object.__setattr__(config, "startup_timeout", startup_budget(config.target, config.slices.num_slices).total)
    return config


def _check_workload_command(config: RunConfig, rules: KindRules) -> None:
    """A kind that runs its own workloads (the local target's JAX one, or the light one for load tests) takes
    one of them."""
    if rules.workloads:
        require(tuple(config.workload.command) in rules.workloads.values(), "workload.command",
                list(config.workload.command), " or ".join(str(list(c)) for c in rules.workloads.values())
                + f" on the {config.target} target (its workloads: {', '.join(rules.workloads)})")


def stall_rule(config: RunConfig, reported: bool = True) -> tuple[float, dict[str, Any] | None, list[str]]:
    """(stall limit, cadence to re-derive it from at run time or None when explicit, warnings) of a run: derived
    unless the description gives `stall_timeout` (core.measure.cadence.stall_rule, the one composition).

    `reported`: the workload's steps are read (the training DAG's pod logs, on by default; events locally).
    """
    from mtc_provider.core.measure.cadence import DERIVED, stall_rule as compose

    value = DERIVED if config.stall_timeout is None else config.stall_timeout
    return compose(value, config.checkpointing, config.target, reported=reported, step_seconds=config.step_seconds,
                   extra_flags=config.workload.extra_flags)


def run_target(config: RunConfig, local_home: str, gcp_conn_id: str) -> dict[str, Any]:
    """The target dict the operators take (mtc_provider.target.target_from_dict)."""
    return {"kind": config.target, **rules_for(config.target).target_fields(config, local_home, gcp_conn_id)}


def run_plan(config: RunConfig, local_home: str, gcp_conn_id: str = "google_cloud_default",
             reported: bool = True) -> dict[str, Any]:
    """What the training DAG's tasks take (all JSON-serializable), from the validated description. `reported`:
    the launch task reads the workload's steps (its pod_logs; always on the local target)."""
    checked = config.checks  # the cross-section rules ran once, when the description was validated
    assert checked.ramdisk is not None  # sizing is always given
    local = rules_for(config.target).local_processes  # the workload's events are files this machine reads
    stall_timeout, stall_cadence, stall_warnings = stall_rule(config, reported or local)
    description = config.to_dict()
    run_dir = f"{config.checkpointing.base_output_directory.rstrip('/')}/{config.checkpointing.run_name}"
    return {
        "description": description,  # the whole validated run description, every field explicit
        "target": run_target(config, local_home, gcp_conn_id),
        "namespace": config.workload.namespace,
        **{name: description[name] for name in ("slices", "checkpointing", "workload", "sizing", "customization")},
        "ramdisk": checked.ramdisk.quantity,
        "warnings": [*checked.warnings, *stall_warnings],
        "checkpoint_dir": config.checkpointing.checkpoint_directory,
        "target_step": last_step(config.checkpointing, config.workload),  # MaxText's last checkpoint is steps - 1
        "events_dir": f"{run_dir}/events" if local else None,
        "chart_path": f"{run_dir}/goodput.png" if local else None,
        "fault_plan": description["fault_plan"],
        "poll_interval": float(config.poll_interval),
        # The stall limit (explicit, or derived from the cadence); with `stall_cadence` the trigger re-derives it
        # from the step time the run reports (core.measure.cadence). None when stall_timeout was given.
        "stall_timeout": stall_timeout,
        "startup_timeout": config.startup_timeout,  # core.definition.cluster.startup's budget unless the description set one
        "startup_budget": startup_budget(config.target, config.slices.num_slices).line(),
        "stall_cadence": stall_cadence,
        # The checkpoint sensor sees persistent saves only: its limit is measured against them, when their gap in
        # seconds is known; None: it judges no stall (the launch task's trigger sees every source and does).
        "checkpoint_stall_timeout": checkpoint_stall_timeout(config, stall_timeout),
        **{name: description[name] for name in ("keep_failed_attempts", "pod_logs", "pod_logs_interval")},
    }


def checkpoint_stall_timeout(config: RunConfig, stall_timeout: float) -> float | None:
    """A stall limit for a watcher of persistent checkpoints alone (the training DAG's checkpoint sensor)."""
    from mtc_provider.core.measure.cadence import run_cadence, step_seconds_of

    step = step_seconds_of(config.target, config.step_seconds, config.workload.extra_flags)
    cadence = run_cadence(config.checkpointing, config.target, reported=False, step_seconds=step)
    if config.checkpointing.enable_multi_tier_checkpointing or cadence.gap(step) is None:
        return None
    return max(stall_timeout, cadence.stall_limit(step))

