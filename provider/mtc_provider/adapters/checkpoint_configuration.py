"""CheckpointConfiguration (cluster-scoped `checkpointing.gke.io/v1`): get, and create-or-update in place.

The kubernetes client comes from a factory so every call can use a fresh token: production resolves the
cluster endpoint and CA once (GKEHook) and builds each client with the google provider's
GKEKubernetesHook; a 401 (token expired during a long run) rebuilds the client once and continues.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from kubernetes import client as k8s

from mtc_provider.adapters import retry
from mtc_provider.adapters.protocols import NotFound
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.basics.vocabulary import CHECKPOINT_CONFIGURATION

GROUP, VERSION, PLURAL = CHECKPOINT_CONFIGURATION.group, CHECKPOINT_CONFIGURATION.version, CHECKPOINT_CONFIGURATION.plural
KIND = CHECKPOINT_CONFIGURATION.kind


@dataclass(frozen=True)
class ApplyResult:
    name: str
    action: str  # "created" | "updated" | "unchanged"
    object: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "action": self.action, "changed": self.action != "unchanged",
                "resourceVersion": (self.object.get("metadata") or {}).get("resourceVersion"),
                "spec": self.object.get("spec")}


class CheckpointConfigurationApi:
    def __init__(self, api_client_factory: Callable[[], k8s.ApiClient]) -> None:
        self._factory = api_client_factory
        self._api: k8s.CustomObjectsApi | None = None

    def _objects(self, fresh: bool = False) -> k8s.CustomObjectsApi:
        if self._api is None or fresh:
            self._api = k8s.CustomObjectsApi(self._factory())
        return self._api

    def _call(self, method: str, *args: Any, permission: str, **kwargs: Any) -> Any:
        try:
            return retry.call(getattr(self._objects(), method), *args, permission=permission, **kwargs)
        except retry.Unauthorized:
            # The token expired under us: a new client mints a new one; a second 401 is real.
            return retry.call(getattr(self._objects(fresh=True), method), *args, permission=permission, **kwargs)

    def get(self, name: str) -> dict[str, Any] | None:
        try:
            return self._call("get_cluster_custom_object", GROUP, VERSION, PLURAL, name,
                              permission=f"{PLURAL}.{GROUP} get")
        except NotFound:
            return None

    def apply(self, body: dict[str, Any]) -> ApplyResult:
        """Create, or replace in place with the read resourceVersion; no write when spec and labels match."""
        return retry.policy((retry.Conflict,))(self._apply_once)(body)

    def _apply_once(self, body: dict[str, Any]) -> ApplyResult:
        name = body["metadata"]["name"]
        current = self.get(name)
        if current is None:
            try:
                created = self._call("create_cluster_custom_object", GROUP, VERSION, PLURAL, body,
                                     permission=f"{PLURAL}.{GROUP} create")
                return ApplyResult(name, "created", created)
            except retry.ApiError as exc:
                if exc.status == 409:  # created concurrently: go round again and compare
                    raise retry.Conflict(str(exc)) from exc
                raise
        if _same(current, body):
            return ApplyResult(name, "unchanged", current)
        desired = dict(body)
        desired["metadata"] = {**current.get("metadata", {}), **body["metadata"],
                               "resourceVersion": current["metadata"].get("resourceVersion")}
        if "labels" in body["metadata"]:
            desired["metadata"]["labels"] = body["metadata"]["labels"]
        replaced = self._call("replace_cluster_custom_object", GROUP, VERSION, PLURAL, name, desired,
                              permission=f"{PLURAL}.{GROUP} update")
        return ApplyResult(name, "updated", replaced)


def _same(current: dict[str, Any], desired: dict[str, Any]) -> bool:
    labels = (desired.get("metadata") or {}).get("labels")
    same_labels = labels is None or (current.get("metadata") or {}).get("labels") == labels
    return current.get("spec") == desired.get("spec") and same_labels


def control_plane_url(cluster: dict[str, Any], use_internal_ip: bool = False, use_dns_endpoint: bool = False) -> str:
    """The control plane's URL, chosen as the google provider's GKEClusterAuthDetails.fetch_cluster_info does."""
    if use_dns_endpoint:
        dns = ((cluster.get("controlPlaneEndpointsConfig") or {}).get("dnsEndpointConfig") or {}).get("endpoint")
        if not dns:
            raise SpecError("target.use_dns_endpoint", use_dns_endpoint,
                            f"False: cluster {cluster.get('name')!r} has no DNS-based control-plane endpoint")
        return f"https://{dns}"
    endpoint = (cluster.get("privateClusterConfig") or {}).get("privateEndpoint") if use_internal_ip else None
    return f"https://{endpoint or cluster['endpoint']}"


def gke_api_client_factory(cluster: dict[str, Any], gcp_conn_id: str, impersonation_chain: Any = None,
                           use_internal_ip: bool = False, use_dns_endpoint: bool = False) -> Callable[[], k8s.ApiClient]:
    """Endpoint and CA resolved once from the cluster description; each call builds a client with a fresh token.
    Through the DNS endpoint the hook verifies the publicly trusted certificate, not the cluster CA."""
    from airflow.providers.google.cloud.hooks.kubernetes_engine import GKEKubernetesHook

    url = control_plane_url(cluster, use_internal_ip, use_dns_endpoint)
    ca = (cluster.get("masterAuth") or {}).get("clusterCaCertificate", "")

    def factory() -> k8s.ApiClient:
        return GKEKubernetesHook(cluster_url=url, ssl_ca_cert=ca, gcp_conn_id=gcp_conn_id,
                                 impersonation_chain=impersonation_chain, use_dns_endpoint=use_dns_endpoint).get_conn()

    return factory
