"""Glue the sample DAGs call from inside tasks (never at parse time), and their forms' shared fields."""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Mapping

log = logging.getLogger(__name__)

# The sample DAGs' trigger forms, in sections: Airflow groups the fields of a Param's `section` under one heading
# and labels each field with its `title` (airflow/example_dags/example_params_ui_tutorial.py@3.3.2).
TARGET = "Target"
CLUSTER = "Cluster (gke, kubernetes)"
MODEL = "Model and slices"
CHECKPOINTING = "Checkpointing"
RUN = "Run and resubmission"
REHEARSAL = "Rehearsal (local target only)"
FORM_SECTIONS = (TARGET, CLUSTER, MODEL, CHECKPOINTING, RUN, REHEARSAL)
# How a field's description starts when only one target reads it (tests/dags checks the forms say so).
GKE_ONLY = "GKE only"
LOCAL_ONLY = "Local target only"


def form_params(*names: str) -> dict[str, Any]:
    """The Params of the run description's sections that the training and the cluster-setup DAG's forms show alike,
    in the order asked (fresh objects for each DAG)."""
    from airflow.sdk import Param  # the DAG file has imported it already

    shared = {
        "kubernetes_conn_id": lambda: Param(
            "kubernetes_default", type="string", title="Kubernetes connection", section=TARGET,
            description="Kubernetes target only: the Airflow Kubernetes connection"),
        "slices": lambda: Param(
            {"tpu_type": "v6e", "topology": "", "num_slices": 2, "machine_type": ""}, type="object", title="Slices",
            section=MODEL, description="{tpu_type, topology, num_slices, machine_type}; an empty topology is the "
                                       "smallest the target takes (v6e: 2x2, one host; on gke 2x4, as GKE Multislice "
                                       "needs multi-host slices), an empty machine type the TPU type's default"),
        "sizing": lambda: Param(
            {"parameters": 1e6}, type="object", title="Sizing", section=MODEL,
            description="{parameters, bytes_per_parameter, buffer, allow_any_buffer}: the ramdisk size"),
    }
    return {name: shared[name]() for name in names}


def target_param(description: str) -> Any:
    """The form's target field: the installed kinds, the default one first (the registry reads the entry points'
    names, importing none of them: a parse stays light). Where the default kind is not installed, the first one."""
    from airflow.sdk import Param

    from mtc_provider.targets.registry import DEFAULT_KIND, kinds

    installed = sorted(kinds(), key=lambda kind: kind != DEFAULT_KIND)
    return Param(installed[0] if installed else None, enum=installed, title="Target", section=TARGET,
                 description=description)


def trigger_form(declared: Mapping[str, Any], conf: Mapping[str, Any] | None) -> dict[str, Any]:
    """The form's values (the declared Params' defaults) with the trigger's conf laid over them section by section:
    Airflow replaces a whole object param, and the UI's trigger form sends every section in the conf."""
    from mtc_provider.core.definition.description.params import form_with_conf

    return form_with_conf({key: param.value for key, param in declared.items()}, conf)


def _planned_or_fail(plan: Callable[[], dict[str, Any]], conf: Mapping[str, Any] | None,
                     declared: Iterable[str] | None) -> dict[str, Any]:
    # Imported where it runs: DAG files import `planned` at parse time and must not pull the spec machinery.
    from airflow.sdk.exceptions import AirflowFailException

    from mtc_provider.core.basics.errors import SpecError
    from mtc_provider.core.definition.description.params import check_conf_keys

    try:
        if declared is not None:
            check_conf_keys(conf, declared)
        run = plan()
    except SpecError as err:
        raise AirflowFailException(f"invalid run description: {err}") from err
    for warning in run.get("warnings", []):
        log.warning("run description: %s", warning)
    return run


def plan_training_run(params: Mapping[str, Any] | None, conf: Mapping[str, Any] | None = None,
                      declared: Iterable[str] | None = None, **author: Any) -> dict[str, Any]:
    """Validate the trigger form; a bad value fails the run at once (no retry), naming the field.

    `conf` is the run's dag_run.conf and `declared` the DAG's params: a conf key that is not a param is refused.
    `author` (gcp_conn_id, service_account, command) comes from the DAG file, never from the trigger."""
    from mtc_provider.core.definition.description.params import training_run
    from mtc_provider.target import default_local_home

    return _planned_or_fail(lambda: training_run(dict(params or {}), default_local_home(), **author), conf, declared)


def plan_cluster_setup(params: Mapping[str, Any] | None, conf: Mapping[str, Any] | None = None,
                       declared: Iterable[str] | None = None, service_account: str = "default") -> dict[str, Any]:
    """The cluster-setup DAG's plan: its form (the run description's sections and the setup's switches) and every
    name it will create or bind, validated before the first task (core.definition.description.params.cluster_setup_run). A conf key that
    is not a param (a flat `project_id`, say) is refused naming it. `service_account` (the workload KSA bound to the
    bucket) comes from the DAG file, never from the trigger."""
    from mtc_provider.core.definition.description.params import cluster_setup_run
    from mtc_provider.target import default_local_home

    return _planned_or_fail(
        lambda: cluster_setup_run(dict(params or {}), default_local_home(), service_account=service_account),
        conf, declared)


def planned(key: str, task_id: str = "plan") -> str:
    """A template for one field of the plan task's result (render it with render_template_as_native_obj)."""
    return "{{ ti.xcom_pull(task_ids='" + task_id + "')['" + key + "'] }}"
