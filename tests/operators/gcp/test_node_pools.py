"""TPU node pools: OAuth scopes and zones sent as gcloud would (issue 24, items 4 and 5).

The real google-cloud-container REST client talks to the fake Container API (tests/doubles/container.py); the
request body is read back as the fake received it. The Container API adds no scopes when `config.oauthScopes` is
unset (container.v1 discovery document, NodeConfig.oauthScopes, google-api-python-client 2.202) and uses every zone
of the cluster when `locations` is unset (NodePool.locations, same document).
"""

from __future__ import annotations

import pytest

from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.definition.shape.node_pools import CLOUD_PLATFORM_SCOPE, GKE_DEFAULT_SCOPES
from mtc_provider.operators.gcp import MtcCreateTpuNodePoolsOperator
from mtc_provider.target import GkeTarget

from tests.support.gcp_fixtures import CLUSTER, LOCATION, PROJECT

SLICES = {"tpu_type": "v6e", "topology": "4x8", "num_slices": 2, "machine_type": "ct6e-standard-4t"}


class TI:
    task_id = "t"

    def __init__(self) -> None:
        self.xcoms: dict[str, object] = {}

    def xcom_push(self, key: str, value: object) -> None:
        self.xcoms[key] = value


def created_pools(container) -> list[dict]:
    return [r.body["nodePool"] for r in container.requests if r.method == "POST" and r.path.endswith("/nodePools")]


def run(container, location=LOCATION, **kwargs):
    if location != LOCATION:
        cluster = container.clusters[f"{PROJECT}/{LOCATION}/{CLUSTER}"]
        container.add_cluster(PROJECT, location, cluster)
    op = MtcCreateTpuNodePoolsOperator(task_id="pools", target=GkeTarget(PROJECT, location, CLUSTER), slices=SLICES,
                                       api_endpoint=container.url, poll_interval=0.01, deferrable=False, **kwargs)
    return op.execute({"ti": TI()})


def test_tpu_node_pools_get_gcloud_default_scopes_so_nodes_can_pull_from_artifact_registry(container,
                                                                                          gcp_connection):
    result = run(container, node_locations=["us-central1-b"])
    pools = created_pools(container)
    assert [p["name"] for p in pools] == ["mtc-slice-0", "mtc-slice-1"]
    for pool in pools:
        assert pool["config"]["oauthScopes"] == list(GKE_DEFAULT_SCOPES)
        assert "https://www.googleapis.com/auth/devstorage.read_only" in pool["config"]["oauthScopes"]
        assert "serviceAccount" not in pool["config"]  # the Compute Engine default service account
    assert result["oauth_scopes"] == list(GKE_DEFAULT_SCOPES)


def test_tpu_node_pools_with_a_node_service_account_get_cloud_platform(container, gcp_connection):
    account = "tpu-nodes@proj.iam.gserviceaccount.com"
    run(container, node_locations=["us-central1-b"], node_service_account=account)
    for pool in created_pools(container):
        assert pool["config"]["oauthScopes"] == [CLOUD_PLATFORM_SCOPE]
        assert pool["config"]["serviceAccount"] == account


def test_tpu_node_pools_keep_the_scopes_given(container, gcp_connection):
    scopes = ["https://www.googleapis.com/auth/devstorage.read_write", "https://www.googleapis.com/auth/logging.write"]
    run(container, node_locations=["us-central1-b"], oauth_scopes=scopes)
    assert all(pool["config"]["oauthScopes"] == scopes for pool in created_pools(container))


def test_tpu_node_pools_are_created_in_the_tpu_zone(container, gcp_connection):
    result = run(container, node_locations=["us-central1-b"])
    assert [pool["locations"] for pool in created_pools(container)] == [["us-central1-b"], ["us-central1-b"]]
    assert result["node_locations"] == ["us-central1-b"]


def test_zonal_cluster_pools_default_to_the_cluster_zone(container, gcp_connection):
    run(container, location="us-central1-a")
    assert [pool["locations"] for pool in created_pools(container)] == [["us-central1-a"], ["us-central1-a"]]


@pytest.mark.parametrize("kwargs, value, allowed", [
    ({}, "None", "the TPU zone for the node pools, e.g. us-central1-a: cluster location us-central1 is a region"),
    ({"node_locations": ["europe-west4-a"]}, "europe-west4-a", "a zone of the cluster's region us-central1"),
    ({"node_locations": ["us-central1"]}, "us-central1", "a zone such as us-central1-a (not a region)"),
    ({"node_locations": ["us-central1-b"], "oauth_scopes": ["storage-ro"]}, "storage-ro",
     "a scope URL starting with https://www.googleapis.com/auth/"),
    ({"node_locations": ["us-central1-b"], "node_service_account": "Nodes"}, "Nodes", "a Google service account email"),
])
def test_regional_cluster_without_tpu_zone_or_bad_pool_settings_are_refused_before_any_call(
        container, gcp_connection, kwargs, value, allowed):
    with pytest.raises(SpecError) as caught:
        run(container, **kwargs)
    assert allowed in str(caught.value) and repr(value).strip("'") in str(caught.value)
    assert container.requests == []  # not even a token request
    assert container.writes == 0


def test_run_description_takes_node_locations_in_the_clusters_region():
    from mtc_provider.core.definition.description.spec import RunConfig

    import yaml
    from pathlib import Path

    data = yaml.safe_load((Path(__file__).resolve().parents[3] / "examples" / "gke-v6e.yaml").read_text())
    assert RunConfig.from_dict(data).cluster.node_locations == ("us-central1-b",)
    data["cluster"]["node_locations"] = ["europe-west4-a"]
    with pytest.raises(SpecError, match="cluster.node_locations: 'europe-west4-a' is not allowed.*region us-central1"):
        RunConfig.from_dict(data)


def test_an_existing_pool_of_another_shape_is_refused_before_any_create(container, gcp_connection):
    cluster = container.clusters[f"{PROJECT}/{LOCATION}/{CLUSTER}"]
    cluster["nodePools"].append({"name": "mtc-slice-1", "config": {"machineType": "ct6e-standard-4t"},
                                 "placementPolicy": {"tpuTopology": "2x4"}, "status": "RUNNING"})
    with pytest.raises(SpecError, match=r"mtc-slice-1 exists with \('ct6e-standard-4t', '2x4'\)"):
        run(container, node_locations=["us-central1-b"])
    assert container.writes == 0 and created_pools(container) == []


def test_spot_and_reservation_pools_are_created_for_a_run_with_that_capacity(container, gcp_connection):
    """Issue 32 (4): the run's customization.capacity makes its pods select Spot / reservation nodes; the operator
    creates pools of that capacity (GKE: --spot; --reservation-affinity=specific --reservation=NAME)."""
    run(container, node_locations=["us-central1-b"], capacity="spot")
    assert [pool["config"].get("spot") for pool in created_pools(container)] == [True, True]


def test_reservation_pools_consume_the_named_reservation(container, gcp_connection):
    from google.cloud import container_v1

    from mtc_provider.core.definition.shape.capacity import RESERVATION_KEY, pool_capacity

    run(container, node_locations=["us-central1-b"], capacity="reservation", reservation="tpu-res")
    specific = container_v1.ReservationAffinity.Type.SPECIFIC_RESERVATION  # the REST client sends enums as numbers
    for pool in created_pools(container):
        assert pool["config"]["reservationAffinity"] == {"consumeReservationType": int(specific),
                                                         "key": RESERVATION_KEY, "values": ["tpu-res"]}
        assert "spot" not in pool["config"] and pool_capacity(pool) == ("reservation", "tpu-res")


def test_existing_pools_of_another_capacity_and_a_bad_capacity_are_refused_before_any_create(container,
                                                                                             gcp_connection):
    run(container, node_locations=["us-central1-b"])  # on-demand pools mtc-slice-0 and -1
    before = len(created_pools(container))
    with pytest.raises(SpecError, match="mtc-slice-0 exists with capacity on-demand, not spot"):
        run(container, node_locations=["us-central1-b"], capacity="spot")
    with pytest.raises(SpecError, match="capacity: 'preemptible' is not allowed; allowed: on-demand, spot, reservation"):
        run(container, node_locations=["us-central1-b"], capacity="preemptible")
    with pytest.raises(SpecError, match="reservation: '' is not allowed"):
        run(container, node_locations=["us-central1-b"], capacity="reservation")
    assert len(created_pools(container)) == before


@pytest.mark.parametrize("reservation", ["projects/owner-proj/reservations/tpu-res",
                                         "tpu-res/reservationBlocks/block-7/reservationSubBlocks/sub-2"])
def test_shared_reservations_and_blocks_go_into_the_pool_as_gcloud_passes_them(container, gcp_connection,
                                                                               reservation):
    """Compute Engine ReservationAffinity.values: a name, or projects/OWNER/reservations/NAME for a shared one;
    gcloud's --reservation and xpk pass blocks as NAME/reservationBlocks/BLOCK[/reservationSubBlocks/SUB]."""
    from mtc_provider.core.definition.shape.capacity import pool_capacity

    run(container, node_locations=["us-central1-b"], capacity="reservation", reservation=reservation)
    pools = created_pools(container)
    assert len(pools) == 2
    for pool in pools:
        assert pool["config"]["reservationAffinity"]["values"] == [reservation]
        assert pool_capacity(pool) == ("reservation", reservation)
