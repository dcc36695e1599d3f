"""The pure readiness checks and IAM merge, over plain dicts."""

from __future__ import annotations

import copy

from mtc_provider.core.definition.cluster.readiness import add_members, all_ok, enable_steps, evaluate_cluster
from mtc_provider.core.definition.shape.tpu import SliceSpec

SLICES = SliceSpec("v6e", "4x8", 2, "ct6e-standard-4t")


def ready_cluster() -> dict:
    pool = {"config": {"machineType": "ct6e-standard-4t", "workloadMetadataConfig": {"mode": "GKE_METADATA"}},
            "placementPolicy": {"tpuTopology": "4x8"}}
    return {
        "name": "mtc", "currentMasterVersion": "1.32.4-gke.1415000",
        "workloadIdentityConfig": {"workloadPool": "proj.svc.id.goog"},
        "addonsConfig": {"highScaleCheckpointingConfig": {"enabled": True}, "gcsFuseCsiDriverConfig": {"enabled": True}},
        "nodePools": [{"name": "default-pool", "config": {"machineType": "e2-standard-4"}},
                      {"name": "a", **copy.deepcopy(pool)}, {"name": "b", **copy.deepcopy(pool)}],
    }


def by_name(checks):
    return {check.name: check for check in checks}


def test_ready_cluster_passes_every_check():
    configuration = {"spec": {"cloudStorageBucketName": "b",
                              "nodeSelector": {"node.kubernetes.io/instance-type": "ct6e-standard-4t"}}}
    checks = evaluate_cluster(ready_cluster(), SLICES, "proj", "us-central1", configuration, "cfg")
    assert all_ok(checks), [c for c in checks if not c.ok]
    assert [c.name for c in checks] == ["workload_identity_pool", "high_scale_checkpointing_addon",
                                        "gcs_fuse_csi_driver_addon", "control_plane_version", "not_autopilot",
                                        "tpu_node_pools", "tpu_node_pools_workload_identity",
                                        "checkpoint_configuration"]


def test_each_failure_names_observed_expected_and_the_guide_command():
    cluster = ready_cluster()
    cluster["workloadIdentityConfig"] = {}
    cluster["addonsConfig"]["highScaleCheckpointingConfig"]["enabled"] = False
    cluster["currentMasterVersion"] = "1.32.3-gke.1170000"  # the minimum itself is not later than itself
    cluster["autopilot"] = {"enabled": True}
    cluster["nodePools"][2]["placementPolicy"]["tpuTopology"] = "2x4"
    checks = by_name(evaluate_cluster(cluster, SLICES, "proj", "us-central1", None, "cfg"))
    assert not checks["workload_identity_pool"].ok
    assert checks["workload_identity_pool"].expected == "proj.svc.id.goog"
    assert "gcloud container clusters update mtc --workload-pool=proj.svc.id.goog --location=us-central1" in \
        checks["workload_identity_pool"].fix
    assert "--update-addons=HighScaleCheckpointing=ENABLED,GcsFuseCsiDriver=ENABLED" in \
        checks["high_scale_checkpointing_addon"].fix
    assert checks["gcs_fuse_csi_driver_addon"].ok
    assert not checks["control_plane_version"].ok and checks["control_plane_version"].observed == "1.32.3-gke.1170000"
    assert not checks["not_autopilot"].ok
    pools = checks["tpu_node_pools"]
    assert not pools.ok and "b (ct6e-standard-4t, 2x4)" in pools.observed
    assert "--machine-type=ct6e-standard-4t --tpu-topology=4x8" in pools.fix and "x 1" in pools.fix
    assert not checks["checkpoint_configuration"].ok


def test_existing_tpu_pool_without_gke_metadata_fails_with_the_update_command():
    """A TPU pool created before Workload Identity keeps GCE_METADATA (GKE, "Use Workload Identity Federation for
    GKE": existing node pools must be updated); its pods would not get their KSA's identity on the bucket."""
    cluster = ready_cluster()
    cluster["nodePools"][2]["config"]["workloadMetadataConfig"] = {"mode": "GCE_METADATA"}
    del cluster["nodePools"][1]["config"]["workloadMetadataConfig"]  # unset: MODE_UNSPECIFIED, not GKE_METADATA
    check = by_name(evaluate_cluster(cluster, SLICES, "proj", "us-central1"))["tpu_node_pools_workload_identity"]
    assert not check.ok and check.observed == ["a (MODE_UNSPECIFIED)", "b (GCE_METADATA)"]
    assert ("gcloud container node-pools update b --cluster=mtc --location=us-central1 "
            "--workload-metadata=GKE_METADATA --project=proj") in check.fix
    cluster["nodePools"][0]["config"]["workloadMetadataConfig"] = {"mode": "GCE_METADATA"}  # not a TPU pool
    for pool in cluster["nodePools"][1:]:
        pool["config"]["workloadMetadataConfig"] = {"mode": "GKE_METADATA"}
    assert by_name(evaluate_cluster(cluster, SLICES, "proj", "us-central1"))["tpu_node_pools_workload_identity"].ok


def test_preflight_blocks_what_no_following_task_fixes_and_lists_the_changes():
    from mtc_provider.core.definition.cluster.readiness import changes_summary, preflight, setup_fixable

    cluster = ready_cluster()
    cluster["currentMasterVersion"] = "1.32.3-gke.1170000"  # the guide wants later than this
    cluster["workloadIdentityConfig"] = {}
    checks = evaluate_cluster(cluster, SLICES, "proj", "us-central1")
    fixable = setup_fixable({"enable_mtc": True, "create_node_pools": False})
    blocking, to_change = preflight(checks, fixable)
    assert [c.name for c in blocking] == ["control_plane_version"]
    assert [c.name for c in to_change] == ["workload_identity_pool"]
    assert "workload_identity_pool" in changes_summary(to_change) and "--workload-pool" in changes_summary(to_change)
    assert [c.name for c in preflight(checks, [])[0]] == ["workload_identity_pool", "control_plane_version"]


def test_versions_compare_numerically_not_as_strings():
    cluster = ready_cluster()
    cluster["currentMasterVersion"] = "1.32.10-gke.1"  # "1.32.10" < "1.32.3" as strings
    assert by_name(evaluate_cluster(cluster, SLICES, "proj", "l"))["control_plane_version"].ok


def test_enough_pools_for_the_requested_slices():
    cluster = ready_cluster()
    four = SliceSpec("v6e", "4x8", 4, "ct6e-standard-4t")
    assert not by_name(evaluate_cluster(cluster, four, "proj", "l"))["tpu_node_pools"].ok


def test_enable_steps_keep_the_guides_order():
    cluster = ready_cluster()
    assert enable_steps(cluster, "proj") == []
    cluster["workloadIdentityConfig"] = {"workloadPool": "other.svc.id.goog"}
    cluster["addonsConfig"] = {}
    assert enable_steps(cluster, "proj") == ["workload_pool", "addons"]


ROLE = "roles/storage.objectUser"


def test_add_members_is_idempotent_and_keeps_other_bindings_and_etag():
    policy = {"etag": "CAE=", "version": 1, "bindings": [{"role": "roles/storage.admin", "members": ["user:a@x"]}]}
    new, added, already = add_members(policy, ROLE, ["m1", "m2"])
    assert (added, already) == (["m1", "m2"], [])
    assert new["version"] == 3 and new["etag"] == "CAE="
    assert {"role": "roles/storage.admin", "members": ["user:a@x"]} in new["bindings"]
    again, added2, already2 = add_members(new, ROLE, ["m1", "m2"])
    assert (added2, already2) == ([], ["m1", "m2"]) and again == new
    assert policy["bindings"] == [{"role": "roles/storage.admin", "members": ["user:a@x"]}]  # input untouched


def test_conditional_binding_does_not_count_as_granted():
    policy = {"bindings": [{"role": ROLE, "members": ["m1"], "condition": {"expression": "false", "title": "t"}}]}
    new, added, already = add_members(policy, ROLE, ["m1"])
    assert added == ["m1"] and already == []
    assert len(new["bindings"]) == 2 and new["bindings"][0]["condition"]


def test_spot_and_reservation_runs_need_node_pools_of_that_capacity():
    """Issue 32 (4): customization.capacity made the pods select Spot or reservation nodes, but readiness counted
    on-demand pools as ready; the pods then stayed Pending. GKE's Container API shapes (core.definition.shape.capacity)."""
    from mtc_provider.core.definition.shape.capacity import RESERVATION_KEY, pool_capacity

    cluster = ready_cluster()
    assert "tpu_node_pools_capacity" not in by_name(evaluate_cluster(cluster, SLICES, "proj", "us-central1"))
    spot = by_name(evaluate_cluster(cluster, SLICES, "proj", "us-central1", capacity=("spot", "")))
    check = spot["tpu_node_pools_capacity"]
    assert not check.ok and check.observed == ["a (on-demand)", "b (on-demand)"] and "--spot" in check.fix
    for pool in cluster["nodePools"][1:]:
        pool["config"]["spot"] = True
    assert by_name(evaluate_cluster(cluster, SLICES, "proj", "us-central1", capacity=("spot", "")))[
        "tpu_node_pools_capacity"].ok
    reserved = {"consumeReservationType": "SPECIFIC_RESERVATION", "key": RESERVATION_KEY, "values": ["tpu-res"]}
    for pool in cluster["nodePools"][1:]:
        pool["config"].pop("spot")
        pool["config"]["reservationAffinity"] = reserved
    assert pool_capacity(cluster["nodePools"][1]) == ("reservation", "tpu-res")
    wrong = by_name(evaluate_cluster(cluster, SLICES, "proj", "us-central1", capacity=("reservation", "other")))
    assert not wrong["tpu_node_pools_capacity"].ok and "--reservation=other" in wrong["tpu_node_pools_capacity"].fix
    assert by_name(evaluate_cluster(cluster, SLICES, "proj", "us-central1", capacity=("reservation", "tpu-res")))[
        "tpu_node_pools_capacity"].ok
