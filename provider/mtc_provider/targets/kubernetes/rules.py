"""The kubernetes kind's rules for the run description (core.basics.kind_rules): any cluster with JobSet, reached by an
Airflow Kubernetes connection; no managed control plane, so its plan checks only what the Kubernetes API shows."""

from __future__ import annotations

from typing import Any

from mtc_provider.core.basics.kind_rules import KindRules


def _target_fields(config: Any, local_home: str, gcp_conn_id: str) -> dict[str, Any]:
    return {"kubernetes_conn_id": config.kubernetes_conn_id, "namespace": config.workload.namespace,
            "gcp_conn_id": gcp_conn_id, "project_id": config.cluster.project_id if config.cluster else None,
            "location": config.bucket.location if config.bucket else None}


def _plan_checks(checks: tuple) -> tuple[tuple, tuple[str, ...]]:
    from mtc_provider.core.definition.description.plan import Step
    from mtc_provider.core.definition.cluster.readiness import JOBSET_INSTALL

    unseen = tuple(f"{step.name}: {step.description} (not visible through a Kubernetes connection: check it with "
                   "a gke target or gcloud)" for step in checks)
    return (
        Step("jobset-api", f"JobSet's API served ({JOBSET_INSTALL} installs it)"),
        Step("checkpoint-configuration-api", "the CheckpointConfiguration API served (GKE's HighScaleCheckpointing "
             "addon installs it)"),
    ), unseen


RULES = KindRules(connection_field="kubernetes_conn_id", target_fields=_target_fields, plan_checks=_plan_checks)
