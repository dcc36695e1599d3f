"""Readiness cross-checks the CheckpointConfiguration against the run (issue 32, problem 4): its nodeSelector must
select the slices' machine type, its bucket must be the run's, its inMemoryVolumeSize must hold the run's ramdisk.
Before, readiness only checked that an object of that name existed."""

from __future__ import annotations

import copy

import jsonschema
import pytest
import yaml

from mtc_provider.core.definition.render.checkpoint_config import build_checkpoint_configuration
from mtc_provider.core.definition.cluster.configuration_match import configuration_mismatches, quantity_bytes
from mtc_provider.core.definition.cluster.readiness import (configuration_check, evaluate_cluster, evaluate_kubernetes,
                                                    run_ramdisk)
from mtc_provider.core.definition.shape.sizing import ramdisk_size
from mtc_provider.core.definition.shape.tpu import SliceSpec
from tests.core.test_readiness import ready_cluster
from tests.support.tests_reference import crd_schema

SLICES = SliceSpec("v6e", "4x8", 2, "ct6e-standard-4t")  # 8 hosts per slice
RAMDISK = ramdisk_size(70e9, SLICES.hosts_per_slice)  # 225Gi per host
SERVING = build_checkpoint_configuration("cfg", "ckpts", SLICES, RAMDISK)


def _valid(configuration: dict) -> dict:
    """Every configuration here is one the API server would accept (the CRD's schema, tests/data/third_party)."""
    jsonschema.validate(configuration, crd_schema())
    return configuration


def _with(**spec) -> dict:
    changed = copy.deepcopy(SERVING)
    changed["spec"].update(spec)
    return _valid(changed)


@pytest.mark.parametrize("text, expected", [("225Gi", 225 * 2**30), ("241500000000", 241_500_000_000),
                                            ("241.5G", 241_500_000_000), ("1e9", 10**9), ("0.5Gi", 2**29),
                                            ("10", 10), ("many", None), ("", None), (None, None)])
def test_quantities_read_as_kubernetes_reads_them(text, expected):
    # https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/
    assert quantity_bytes(text) == expected


def test_the_configuration_the_provider_builds_for_the_run_serves_it():
    assert configuration_mismatches(_valid(SERVING), SLICES, "ckpts", RAMDISK) == []
    check = configuration_check(SERVING, "cfg", SLICES, "ckpts", RAMDISK)
    assert check.ok and check.observed == "cfg (bucket ckpts)"


@pytest.mark.parametrize("spec, field, value, expected", [
    ({"nodeSelector": {"node.kubernetes.io/instance-type": "ct5p-hightpu-4t"}},
     "spec.nodeSelector[node.kubernetes.io/instance-type]", "'ct5p-hightpu-4t'", "the run's nodes carry 'ct6e-standard-4t'"),
    ({"nodeSelector": {"cloud.google.com/gke-nodepool": "pool-0"}},
     "spec.nodeSelector[cloud.google.com/gke-nodepool]", "'pool-0'", "the run's node pools are not known here"),
    ({"cloudStorageBucketName": "someone-elses"}, "spec.cloudStorageBucketName", "'someone-elses'",
     "expected 'ckpts', the run's bucket"),
    ({"inMemoryVolumeSize": "100Gi"}, "spec.inMemoryVolumeSize", "'100Gi'", "expected at least 225Gi"),
])
def test_each_mismatch_names_field_value_and_what_the_run_expects(spec, field, value, expected):
    problems = configuration_mismatches(_with(**spec), SLICES, "ckpts", RAMDISK)
    assert len(problems) == 1 and problems[0].startswith(f"{field}: {value}") and expected in problems[0], problems
    check = configuration_check(_with(**spec), "cfg", SLICES, "ckpts", RAMDISK)
    assert not check.ok and f"CheckpointConfiguration cfg {field}" in check.observed
    assert "MtcApplyCheckpointConfigurationOperator" in check.fix and "kubectl edit checkpointconfiguration cfg" \
        in check.fix


def test_gkes_own_example_configuration_serves_no_tpu_run():
    """GKE's multitier example (tests/data/third_party): an e2-small selector, a placeholder bucket, and "10" --
    a quantity of 10 bytes -- as its volume size: all three are reported."""
    from tests.conftest import REPO

    text = (REPO / "tests/data/third_party/gke-mtc-example-checkpointconfiguration.yaml").read_text()
    example = yaml.safe_load(text.replace("!BUCKET!", "example-bucket"))
    problems = configuration_mismatches(_valid(example), SLICES, "ckpts", RAMDISK)
    assert [p.split(":")[0] for p in problems] == [
        "spec.nodeSelector[node.kubernetes.io/instance-type]", "spec.cloudStorageBucketName", "spec.inMemoryVolumeSize"]


def test_both_targets_readiness_evaluators_cross_check_it():
    served = {"jobsets.jobset.x-k8s.io/v1alpha2": True, "checkpointconfigurations.checkpointing.gke.io/v1": True}
    other_bucket = _with(cloudStorageBucketName="other")
    gke = evaluate_cluster(ready_cluster(), SLICES, "proj", "us-central1", other_bucket, "cfg", "ckpts", RAMDISK)
    plain = evaluate_kubernetes(served, other_bucket, "cfg", SLICES, "ckpts", RAMDISK)
    for checks in (gke, plain):
        failed = [c for c in checks if not c.ok]
        assert [c.name for c in failed] == ["checkpoint_configuration"]
        assert "spec.cloudStorageBucketName: 'other'" in failed[0].observed


def test_the_ramdisk_is_checked_only_when_the_run_gives_its_sizing():
    assert run_ramdisk(SLICES, None) is None
    assert run_ramdisk(SLICES, {"parameters": 70e9}).quantity == "225Gi"
    small = _with(inMemoryVolumeSize="1Gi")
    assert configuration_check(small, "cfg", SLICES, "ckpts", None).ok
    assert not configuration_check(small, "cfg", SLICES, "ckpts", run_ramdisk(SLICES, {"parameters": 70e9})).ok


# --- the selector against the labels the run's nodes will carry (pure, table-driven) ---------------------------
# GKE labels every node of a TPU pool with its machine type (node.kubernetes.io/instance-type), accelerator
# (cloud.google.com/gke-tpu-accelerator), topology (cloud.google.com/gke-tpu-topology) and pool
# (cloud.google.com/gke-nodepool), plus the pool's config.labels; the CRD's nodeSelector is a plain map
# (tests/data/third_party checkpointconfiguration CRD: no matchExpressions), matched as a Pod's nodeSelector.
def _pool(name, machine="ct6e-standard-4t", topology="4x8", labels=None):
    config = {"machineType": machine, "workloadMetadataConfig": {"mode": "GKE_METADATA"}}
    if labels:
        config["labels"] = labels
    return {"name": name, "config": config, "placementPolicy": {"tpuTopology": topology}}


ACCEL = "cloud.google.com/gke-tpu-accelerator"
TOPO = "cloud.google.com/gke-tpu-topology"
POOL = "cloud.google.com/gke-nodepool"
TYPE = "node.kubernetes.io/instance-type"
RUN_POOLS = [_pool("slice-a", labels={"team": "ml"}), _pool("slice-b", labels={"team": "ml"})]


@pytest.mark.parametrize("selector, pools, ready, names", [
    ({ACCEL: "tpu-v6e-slice", TOPO: "4x8"}, RUN_POOLS, True, []),  # exactly the run's nodes, no machine type
    ({ACCEL: "tpu-v6e-slice", TOPO: "4x8"}, None, True, []),  # the same, pools unknown (Kubernetes target)
    ({TYPE: "ct6e-standard-4t"}, RUN_POOLS, True, []),
    ({TYPE: "ct6e-standard-4t", "team": "ml"}, RUN_POOLS, True, []),  # a pool's own label, on both pools
    ({TYPE: "ct6e-standard-4t", POOL: "another-pool"}, RUN_POOLS, False, [POOL]),  # selects none of the run's nodes
    ({TYPE: "ct6e-standard-4t", POOL: "slice-a"}, RUN_POOLS, False, [POOL]),  # one slice of two
    ({TYPE: "ct6e-standard-4t", POOL: "slice-a"}, None, False, [POOL]),  # cannot be confirmed without the pools
    ({ACCEL: "tpu-v6e-slice", TOPO: "2x4"}, RUN_POOLS, False, [TOPO]),  # another topology
    ({ACCEL: "tpu-v5p-slice"}, RUN_POOLS, False, [ACCEL]),
    ({TYPE: "ct6e-standard-4t", "example.com/rack": "r1"}, RUN_POOLS, False, ["example.com/rack"]),
    ({}, RUN_POOLS, True, []),  # an empty selector selects every node
])
def test_the_selector_is_evaluated_against_the_run_nodes_labels(selector, pools, ready, names):
    configuration = _with(nodeSelector=selector)
    problems = configuration_mismatches(configuration, SLICES, "ckpts", RAMDISK, pools)
    assert [p.split("]")[0].removeprefix("spec.nodeSelector[") for p in problems] == names
    assert configuration_check(configuration, "cfg", SLICES, "ckpts", RAMDISK, pools).ok is ready


def test_gke_readiness_judges_the_selector_against_the_clusters_pools_of_the_slices_shape():
    cluster = ready_cluster()  # pools a and b are the run's shape
    by_accel = _with(nodeSelector={ACCEL: "tpu-v6e-slice", TOPO: "4x8"})
    other_pool = _with(nodeSelector={TYPE: "ct6e-standard-4t", POOL: "another-pool"})
    check = {c.name: c for c in evaluate_cluster(cluster, SLICES, "proj", "us-central1", by_accel, "cfg", "ckpts",
                                                  RAMDISK)}["checkpoint_configuration"]
    assert check.ok, check.observed
    check = {c.name: c for c in evaluate_cluster(cluster, SLICES, "proj", "us-central1", other_pool, "cfg", "ckpts",
                                                  RAMDISK)}["checkpoint_configuration"]
    assert not check.ok and "spec.nodeSelector[cloud.google.com/gke-nodepool]: 'another-pool'" in check.observed
    assert "the run's nodes carry 'a', 'b'" in check.observed and "pools a, b" in check.expected
