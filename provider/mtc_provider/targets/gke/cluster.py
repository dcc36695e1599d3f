"""GKE cluster I/O: describe, the two MTC updates, node pools and operations, through `google-cloud-container`.

The client is injected: production builds it from the google provider's GKEHook credentials (optionally
on a REST endpoint such as a private or regional one); tests hand in a REST client pointed at a fake
server. Responses leave as camelCase REST dicts, the shape the core's readiness checks read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.cloud import container_v1

from mtc_provider.adapters import retry
from mtc_provider.core.basics.errors import OperationFailed
from mtc_provider.core.definition.cluster.iam import workload_identity_pool
from mtc_provider.core.definition.shape.tpu import SliceSpec
from mtc_provider.targets.gke.target import GkeTarget

TIMEOUT = 60.0


def to_dict(message: Any) -> dict[str, Any]:
    """A proto-plus message as its REST JSON dict (camelCase keys, enum names)."""
    return type(message).to_dict(message, preserving_proto_field_name=False, use_integers_for_enums=False)


@dataclass
class GkeClusterApi:
    client: container_v1.ClusterManagerClient
    project_id: str
    location: str
    cluster_name: str

    @property
    def cluster_path(self) -> str:
        return f"projects/{self.project_id}/locations/{self.location}/clusters/{self.cluster_name}"

    def operation_path(self, operation: str) -> str:
        return f"projects/{self.project_id}/locations/{self.location}/operations/{operation.rsplit('/', 1)[-1]}"

    def describe(self) -> dict[str, Any]:
        cluster = retry.call(self.client.get_cluster, name=self.cluster_path, retry=None, timeout=TIMEOUT,
                             permission="container.clusters.get")
        return to_dict(cluster)

    def set_workload_pool(self) -> str:
        """The guide's step 1 (`--workload-pool`): its own update, before the addons. Returns the operation."""
        update = container_v1.ClusterUpdate(desired_workload_identity_config=container_v1.WorkloadIdentityConfig(
            workload_pool=workload_identity_pool(self.project_id)))
        return self._update(update)

    def enable_mtc_addons(self) -> str:
        """The guide's step 2 (`--update-addons=HighScaleCheckpointing=ENABLED,GcsFuseCsiDriver=ENABLED`).

        Only these two addon messages are set: unset addons in desiredAddonsConfig are left as they are.
        """
        addons = container_v1.AddonsConfig(
            high_scale_checkpointing_config=container_v1.HighScaleCheckpointingConfig(enabled=True),
            gcs_fuse_csi_driver_config=container_v1.GcsFuseCsiDriverConfig(enabled=True),
        )
        return self._update(container_v1.ClusterUpdate(desired_addons_config=addons))

    def _update(self, update: container_v1.ClusterUpdate) -> str:
        request = container_v1.UpdateClusterRequest(name=self.cluster_path, update=update)
        operation = retry.call(self.client.update_cluster, request=request, retry=None, timeout=TIMEOUT,
                               permission="container.clusters.update")
        return operation.name

    def node_pools(self) -> list[dict[str, Any]]:
        response = retry.call(self.client.list_node_pools, parent=self.cluster_path, retry=None, timeout=TIMEOUT,
                              permission="container.clusters.get")
        return [to_dict(pool) for pool in response.node_pools]

    def create_tpu_node_pool(self, name: str, slices: SliceSpec, node_locations: list[str] | None = None,
                             oauth_scopes: list[str] | None = None, service_account: str | None = None,
                             capacity: str = "on-demand", reservation: str = "") -> str:
        """One slice = one node pool: machine type, topology, compact placement, GKE metadata server, zones, scopes,
        and its capacity: Spot VMs or a specific reservation (core.definition.shape.capacity).

        The API defaults neither the zones nor the scopes as gcloud does (core.definition.shape.node_pools): both are always sent.
        """
        from mtc_provider.core.definition.shape.capacity import RESERVATION_KEY
        from mtc_provider.core.definition.shape.node_pools import node_scopes

        on_capacity: dict[str, Any] = {}
        if capacity == "spot":
            on_capacity["spot"] = True
        elif capacity == "reservation":
            on_capacity["reservation_affinity"] = container_v1.ReservationAffinity(
                consume_reservation_type=container_v1.ReservationAffinity.Type.SPECIFIC_RESERVATION,
                key=RESERVATION_KEY, values=[reservation])
        pool = container_v1.NodePool(
            name=name,
            initial_node_count=slices.hosts_per_slice,
            locations=list(node_locations or []),
            config=container_v1.NodeConfig(
                machine_type=slices.machine_type,
                oauth_scopes=node_scopes(oauth_scopes, service_account),
                service_account=service_account or "",
                workload_metadata_config=container_v1.WorkloadMetadataConfig(
                    mode=container_v1.WorkloadMetadataConfig.Mode.GKE_METADATA),
                **on_capacity,
            ),
            placement_policy=container_v1.NodePool.PlacementPolicy(
                type_=container_v1.NodePool.PlacementPolicy.Type.COMPACT, tpu_topology=slices.topology),
        )
        operation = retry.call(self.client.create_node_pool, parent=self.cluster_path, node_pool=pool, retry=None,
                               timeout=TIMEOUT, permission="container.nodes.create")
        return operation.name

    def operation(self, operation: str) -> dict[str, Any]:
        result = retry.call(self.client.get_operation, name=self.operation_path(operation), retry=None,
                            timeout=TIMEOUT, permission="container.operations.get")
        return to_dict(result)


def operation_done(operation: dict[str, Any]) -> bool:
    """True when finished; raise OperationFailed when it finished in error."""
    if operation.get("status") != "DONE":
        return False
    error = operation.get("error") or {}
    if error.get("code") or error.get("message") or operation.get("statusMessage"):
        raise OperationFailed(
            f"GKE operation {operation.get('name')} ({operation.get('operationType')}) failed: "
            f"{error.get('message') or operation.get('statusMessage')}"
        )
    return True


def cluster_client(target: GkeTarget, api_endpoint: str | None = None) -> container_v1.ClusterManagerClient:
    """A Container API client with the connection's credentials (GKEHook); REST when an endpoint is given."""
    from airflow.providers.google.cloud.hooks.kubernetes_engine import GKEHook

    hook = GKEHook(gcp_conn_id=target.gcp_conn_id, location=target.location,
                   impersonation_chain=target.impersonation_chain)
    if not api_endpoint:
        return hook.get_cluster_manager_client()
    return container_v1.ClusterManagerClient(
        credentials=hook.get_credentials(), transport="rest", client_options={"api_endpoint": api_endpoint})


def cluster_api(target: GkeTarget, api_endpoint: str | None = None) -> GkeClusterApi:
    return GkeClusterApi(cluster_client(target, api_endpoint), target.project_id, target.location, target.cluster_name)
