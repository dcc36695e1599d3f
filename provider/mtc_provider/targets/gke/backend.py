"""The GKE target's backend: the Container API for the control plane, the cluster's Kubernetes API through the
google provider's hooks, and GCS with the target's connection and impersonation chain."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from mtc_provider.adapters.protocols import ConsoleScope
from mtc_provider.targets.common import (InjectsNoFaults, ListsCheckpointsByPath, async_kubernetes_jobset_api,
                                         jobset_version_checks, kubernetes_jobset_api)
from mtc_provider.targets.gke.target import GkeTarget


@dataclass
class GkeCluster:
    target: GkeTarget
    api_endpoint: str | None = None

    def control_plane(self) -> Any:
        from mtc_provider.targets.gke.cluster import cluster_api

        return cluster_api(self.target, self.api_endpoint)

    def provided_by_target(self, step: str, total_hosts: int) -> str | None:
        return None  # every control-plane step applies

    def _client_factory(self, cluster: dict[str, Any]) -> Any:
        from mtc_provider.adapters.checkpoint_configuration import gke_api_client_factory

        t = self.target
        return gke_api_client_factory(cluster, t.gcp_conn_id, t.impersonation_chain, t.use_internal_ip,
                                      t.use_dns_endpoint)

    def kubernetes_client_factory(self) -> Any:
        return self._client_factory(self.control_plane().describe())  # endpoint and CA, once

    def readiness(self, slices: dict[str, Any], sizing: dict[str, Any] | None,
                  checkpoint_configuration_name: str | None, bucket_name: str | None = None,
                  capacity: tuple[str, str] = ("on-demand", "")) -> list[Any]:
        from mtc_provider.core.definition.cluster.readiness import evaluate_cluster, run_ramdisk
        from mtc_provider.core.definition.shape.tpu import SliceSpec

        cluster = self.control_plane().describe()
        config = None
        if checkpoint_configuration_name:
            from mtc_provider.adapters.checkpoint_configuration import CheckpointConfigurationApi

            config = CheckpointConfigurationApi(self._client_factory(cluster)).get(checkpoint_configuration_name)
        from mtc_provider.adapters.access_review import rbac_checks

        spec = SliceSpec(**slices)
        factory = self._client_factory(cluster)
        return (evaluate_cluster(cluster, spec, self.target.project_id, self.target.location, config,
                                 checkpoint_configuration_name, bucket_name, run_ramdisk(spec, sizing),
                                 tuple(capacity))
                + jobset_version_checks(factory) + rbac_checks(factory, self.target.namespace))


@dataclass
class GkeBackend(ListsCheckpointsByPath, InjectsNoFaults):
    target: GkeTarget
    api_endpoint: str | None = None

    def __post_init__(self) -> None:
        self.cluster = GkeCluster(self.target, self.api_endpoint)

    @property
    def console(self) -> ConsoleScope:
        return ConsoleScope(self.target.project_id or "", self.target.location, self.target.cluster_name)

    def jobset_connection(self) -> dict[str, Any]:
        from airflow.providers.google.cloud.hooks.kubernetes_engine import GKEHook
        from airflow.providers.google.cloud.operators.kubernetes_engine import GKEClusterAuthDetails

        from mtc_provider.targets.gke.target import resolve_project

        target = resolve_project(self.target)
        hook = GKEHook(gcp_conn_id=target.gcp_conn_id, location=target.location,
                       impersonation_chain=target.impersonation_chain)
        url, ca = GKEClusterAuthDetails(
            cluster_name=target.cluster_name, project_id=target.project_id, use_internal_ip=target.use_internal_ip,
            use_dns_endpoint=target.use_dns_endpoint, cluster_hook=hook,
        ).fetch_cluster_info()
        return {
            "kind": "gke", "cluster_url": url, "ssl_ca_cert": ca, "gcp_conn_id": target.gcp_conn_id,
            "impersonation_chain": target.impersonation_chain, "project_id": target.project_id,
            "location": target.location, "cluster_name": target.cluster_name,
            "use_dns_endpoint": target.use_dns_endpoint,  # the hooks then trust the public CA, not the cluster's
        }

    def bucket(self) -> Any:
        from mtc_provider.adapters.gcs_bucket import BucketAccess, storage_client

        t = self.target
        return BucketAccess(storage_client(t.gcp_conn_id, t.impersonation_chain), t.project_id, t.location)

    def google(self) -> tuple[str, Any]:
        return self.target.gcp_conn_id, self.target.impersonation_chain


def describe(connection: Mapping[str, Any]) -> str:
    chain = connection.get("impersonation_chain")
    return (f"GKE cluster {connection.get('project_id')}/{connection.get('location')}/"
            f"{connection.get('cluster_name')} via {connection.get('gcp_conn_id')}"
            + (f" impersonating {chain}" if chain else ""))


def _hook_args(connection: Mapping[str, Any]) -> dict[str, Any]:
    return {"cluster_url": connection["cluster_url"], "ssl_ca_cert": connection["ssl_ca_cert"],
            "gcp_conn_id": connection["gcp_conn_id"], "impersonation_chain": connection.get("impersonation_chain"),
            "use_dns_endpoint": bool(connection.get("use_dns_endpoint"))}


def jobset_api(connection: Mapping[str, Any], **timeouts: Any) -> Any:
    """The cluster's JobSets through the google provider's GKEKubernetesHook (a fresh token per client)."""
    from airflow.providers.google.cloud.hooks.kubernetes_engine import GKEKubernetesHook

    return kubernetes_jobset_api(GKEKubernetesHook(**_hook_args(connection)).get_conn, describe(connection), **timeouts)


def async_jobset_api(connection: Mapping[str, Any], **options: Any) -> Any:
    """The trigger's side: GKEKubernetesAsyncHook (its client has no request timeout of its own: ours applies)."""
    from airflow.providers.google.cloud.hooks.kubernetes_engine import GKEKubernetesAsyncHook

    hook = GKEKubernetesAsyncHook(**_hook_args(connection))
    return async_kubernetes_jobset_api(hook.get_conn, describe(connection), **options)
