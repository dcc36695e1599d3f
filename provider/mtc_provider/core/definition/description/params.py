"""From a training DAG's params (the trigger form) to the specs every task of the DAG uses (pure).

The form has the sections of the `mtc` YAML (core.definition.description.run): it is parsed and validated by `core.definition.description.run.parse_run`, the
function `mtc plan FILE` calls, so the same bad value gives the same error through both. What the DAG author
decides (the Google connection, the Kubernetes service account, the GKE command) comes from the DAG file, never
from the form.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from mtc_provider.core.basics.errors import SpecError, require
from mtc_provider.core.basics.kind_rules import rules_for
from mtc_provider.core.definition.render.maxtext import DEFAULT_LAYOUT, maxtext_command
from mtc_provider.core.basics.names import check_node_pool_prefix, check_service_account
from mtc_provider.core.definition.description.run import SETUP_IMAGE, parse_run, run_plan
from mtc_provider.core.definition.description.spec import LOCAL_IMAGE

FORM_KIND = "local"  # the training form's target when it names none (mtc_provider.target.DEFAULT_KIND)
# Form fields that steer the DAG, not the run (they are not part of the run description).
DAG_SWITCHES: tuple[str, ...] = ()  # every form field is a run description field (RunConfig), one to one


def check_conf_keys(conf: Mapping[str, Any] | None, declared: Iterable[str]) -> None:
    """A trigger may set only the DAG's declared params: connections, service accounts and commands come from
    the DAG author, never from `dag_run.conf`."""
    allowed = sorted(declared)
    for key, value in (conf or {}).items():
        if key not in allowed:
            raise SpecError(f"dag_run.conf.{key}", value, f"one of the DAG's params: {', '.join(allowed)}")


def form_with_conf(form: Mapping[str, Any], conf: Mapping[str, Any] | None) -> dict[str, Any]:
    """The form's values with a trigger's conf laid over them section by section: `{"checkpointing": {"steps": 9}}`
    changes one field and keeps the form's other checkpointing values (Airflow replaces a whole object param)."""
    merged = dict(form)
    for key, value in (conf or {}).items():
        base = form.get(key)
        merged[key] = {**base, **value} if isinstance(base, Mapping) and isinstance(value, Mapping) else value
    return merged


def _author_values(description: dict[str, Any], service_account: str, command: tuple[str, ...] | None,
                   needs_image: bool) -> dict[str, Any]:
    """Put the DAG author's service account and command in the description; refuse a different one from the form."""
    workload = dict(description.get("workload") or {}) if isinstance(description.get("workload"), Mapping) else {}
    if not workload and description.get("workload") not in (None, {}):
        return description  # RunConfig names the bad section
    given = workload.get("service_account")
    require(given in (None, service_account), "workload.service_account", given,
            f"{service_account!r}, the DAG's own (the DAG author sets it, never the trigger)")
    workload["service_account"] = service_account
    if not rules_for(description.get("target", FORM_KIND)).local_processes:  # the kind runs the author's image
        layout = workload.get("maxtext_layout", DEFAULT_LAYOUT)
        own = list(command) if command else list(maxtext_command(layout)) if isinstance(layout, str) else None
        given = workload.get("command")
        require(given in (None, own), "workload.command", given,
                f"{own} (the DAG author's; leave it out) on the {description.get('target')} target")
        workload["command"] = list(command) if command else None
        if not needs_image and workload.get("image") in (None, "", LOCAL_IMAGE):
            workload["image"] = SETUP_IMAGE
    return {**description, "workload": workload}


def training_run(params: Mapping[str, Any], local_home: str, *, gcp_conn_id: str = "google_cloud_default",
                 service_account: str = "default", command: tuple[str, ...] | None = None,
                 needs_image: bool = True) -> dict[str, Any]:
    """Validate the form (the run description, core.definition.description.run.parse_run) and return the dicts the training DAG's tasks
    take (all JSON-serializable). `needs_image=False` for DAGs that launch no training container (cluster setup)."""
    description = {key: value for key, value in params.items() if key not in DAG_SWITCHES}
    description.setdefault("target", FORM_KIND)
    description = _author_values(description, service_account, command, needs_image)
    reported = params.get("pod_logs", True) not in (False, "false", "False")  # the leader's step lines are read
    return run_plan(parse_run(description, local_home), local_home, gcp_conn_id, reported=reported)


# The cluster-setup DAG's form fields that steer which tasks run or name what they create, beside the run
# description's sections (target, kubernetes_conn_id, bucket, cluster, checkpoint_configuration_name, slices,
# sizing, checkpointing, workload).
SETUP_SWITCHES = ("enable_mtc", "create_node_pools", "node_pool_prefix")


def cluster_setup_run(form: Mapping[str, Any], local_home: str, *, service_account: str = "default") -> dict[str, Any]:
    """The cluster-setup DAG's one validation: its form is a run description in the YAML's sections (parsed by
    `core.definition.description.run.parse_run`, as the training DAG's form and `mtc plan` are) plus SETUP_SWITCHES; every name the setup
    creates or binds is checked too, so nothing is created before a bad value is found (field, value, allowed).
    `service_account` is the DAG author's workload KSA (the one the training DAG's pods run as), never the form's."""
    from mtc_provider.core.definition.shape.node_pools import node_locations
    from mtc_provider.core.definition.cluster.readiness import setup_fixable

    switches = {key: form.get(key) for key in SETUP_SWITCHES}
    for key in ("enable_mtc", "create_node_pools"):
        require(switches[key] in (None, True, False), key, switches[key], "true or false")
    description = {key: value for key, value in form.items() if key not in SETUP_SWITCHES}
    checkpointing = description.get("checkpointing")
    if isinstance(checkpointing, Mapping):  # the setup launches no training: its run needs no steps of its own
        description["checkpointing"] = {"steps": 1, **checkpointing}
    run = training_run(description, local_home, needs_image=False,  # no training container
                       service_account=service_account)
    names = {
        "checkpoint_configuration_name": run["description"]["checkpoint_configuration_name"],
        "service_account": check_service_account(service_account, "service_account"),
        # Pools are named <prefix>-<slice index>: GKE node pool names (core.basics.names).
        "node_pool_prefix": check_node_pool_prefix(switches["node_pool_prefix"] or "mtc-slice"),
    }
    bucket = run["description"]["bucket"] or {}
    cluster = run["description"]["cluster"] or {}
    gke = rules_for(run["target"]["kind"]).node_pools  # the slices are GKE node pools: zones and pools apply
    zones: list[str] = []
    if gke and (cluster["node_locations"] or switches["create_node_pools"]):
        # The guide's --node-locations=${TPU_ZONE}: a regional cluster without it is refused here.
        zones = node_locations(cluster["location"], cluster["node_locations"] or None, "cluster.node_locations")
    return {**run, **names, "bucket_name": bucket.get("name"), "bucket_location": bucket.get("location"),
            "node_locations": zones, "fixed_by_later_tasks": setup_fixable(switches) if gke else []}
