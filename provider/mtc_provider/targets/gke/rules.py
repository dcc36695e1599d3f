"""The gke kind's rules for the run description (core.basics.kind_rules): a cluster section names the cluster, slices are
GKE TPU node pools, and the training DAG's tasks reach it through a Google connection."""

from __future__ import annotations

from typing import Any

from mtc_provider.core.basics.kind_rules import KindRules


def _target_fields(config: Any, local_home: str, gcp_conn_id: str) -> dict[str, Any]:
    assert config.cluster is not None  # cluster_required: RunConfig refused a description without it
    return {"project_id": config.cluster.project_id, "location": config.cluster.location,
            "cluster_name": config.cluster.name, "namespace": config.workload.namespace, "gcp_conn_id": gcp_conn_id}


RULES = KindRules(node_pools=True, cluster_required=True, target_fields=_target_fields)
