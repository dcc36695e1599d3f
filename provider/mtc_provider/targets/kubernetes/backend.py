"""A plain Kubernetes target's backend: any cluster with JobSet installed, through the cncf.kubernetes provider's
KubernetesHook (the Airflow connection says how: kubeconfig, in-cluster or a context), and GCS through the
Google connection. There is no managed control plane: addons and node pools are someone else's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from mtc_provider.adapters.protocols import ApiError
from mtc_provider.targets.common import (InjectsNoFaults, ListsCheckpointsByPath, async_kubernetes_jobset_api,
                                         jobset_version_checks, kubernetes_jobset_api)
from mtc_provider.core.basics.vocabulary import CHECKPOINT_CONFIGURATION, JOBSET
from mtc_provider.targets.kubernetes.target import KubernetesTarget

# The control-plane steps a Kubernetes connection cannot take, and why.
NOT_REACHABLE = {
    "enable_checkpointing": "does not apply to a kubernetes target: GKE addons are not reachable through a "
                            "Kubernetes connection; enable them with a gke target (MtcEnableCheckpointingOperator) "
                            "or gcloud",
    "tpu_node_pools": "does not apply to a kubernetes target: node pools are not reachable through a Kubernetes "
                      "connection; create them with a gke target (MtcCreateTpuNodePoolsOperator) or gcloud",
}


def served_resources(api_client: Any) -> dict[str, bool]:
    """`<plural>.<group>/<version>` -> listed by the cluster's discovery (`GET /apis/<group>/<version>`)."""
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException

    objects = k8s.CustomObjectsApi(api_client)
    served = {}
    for resource in (JOBSET, CHECKPOINT_CONFIGURATION):
        key = resource.served_key
        try:
            found = objects.get_api_resources(resource.group, resource.version)
        except ApiException as exc:  # 404: the group/version is not served; anything else is a real failure
            if exc.status == 404:
                served[key] = False
                continue
            raise ApiError(exc.status or 0, str(exc.body or exc.reason), exc.reason or "") from exc
        served[key] = any(r.name == resource.plural for r in found.resources or [])
    return served


@dataclass
class KubernetesCluster:
    target: KubernetesTarget

    def control_plane(self) -> Any:
        raise NotImplementedError("a Kubernetes connection reaches no managed control plane")

    def provided_by_target(self, step: str, total_hosts: int) -> str | None:
        return NOT_REACHABLE[step]

    def kubernetes_client_factory(self) -> Any:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

        return KubernetesHook(conn_id=self.target.kubernetes_conn_id).get_conn

    def readiness(self, slices: dict[str, Any], sizing: dict[str, Any] | None,
                  checkpoint_configuration_name: str | None, bucket_name: str | None = None,
                  capacity: tuple[str, str] = ("on-demand", "")) -> list[Any]:
        from mtc_provider.adapters.checkpoint_configuration import CheckpointConfigurationApi
        from mtc_provider.core.definition.cluster.readiness import evaluate_kubernetes, run_ramdisk
        from mtc_provider.core.definition.shape.tpu import SliceSpec

        factory = self.kubernetes_client_factory()
        served = served_resources(factory())
        config = None
        if checkpoint_configuration_name and served[CHECKPOINT_CONFIGURATION.served_key]:
            config = CheckpointConfigurationApi(factory).get(checkpoint_configuration_name)
        from mtc_provider.adapters.access_review import rbac_checks

        spec = SliceSpec(**slices)
        return (evaluate_kubernetes(served, config, checkpoint_configuration_name, spec, bucket_name,
                                    run_ramdisk(spec, sizing))
                + jobset_version_checks(factory) + rbac_checks(factory, self.target.namespace))


@dataclass
class KubernetesBackend(ListsCheckpointsByPath, InjectsNoFaults):
    target: KubernetesTarget
    api_endpoint: str | None = None  # no managed control plane: unused
    console: None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.cluster = KubernetesCluster(self.target)

    def jobset_connection(self) -> dict[str, Any]:
        return {"kind": "kubernetes", "kubernetes_conn_id": self.target.kubernetes_conn_id}

    def bucket(self) -> Any:
        from mtc_provider.adapters.gcs_bucket import BucketAccess, storage_client
        from mtc_provider.targets.gke.target import resolve_project

        target = resolve_project(self.target)
        return BucketAccess(storage_client(target.gcp_conn_id, target.impersonation_chain), target.project_id,
                            target.location)

    def google(self) -> tuple[str, Any]:
        return self.target.gcp_conn_id, self.target.impersonation_chain


def describe(connection: Mapping[str, Any]) -> str:
    return f"kubernetes connection {connection.get('kubernetes_conn_id')}"


def jobset_api(connection: Mapping[str, Any], **timeouts: Any) -> Any:
    """The cluster's JobSets through the cncf.kubernetes provider's KubernetesHook (the connection says how)."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    hook = KubernetesHook(conn_id=connection["kubernetes_conn_id"])
    return kubernetes_jobset_api(hook.get_conn, describe(connection), **timeouts)


def async_jobset_api(connection: Mapping[str, Any], **options: Any) -> Any:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

    hook = AsyncKubernetesHook(conn_id=connection["kubernetes_conn_id"])
    return async_kubernetes_jobset_api(hook.get_conn, describe(connection), **options)
