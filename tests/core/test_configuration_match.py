"""Readiness cross-checks the CheckpointConfiguration against the run (issue 32, problem 4): its nodeSelector must
select the slices' machine type, its bucket must be the run's, its inMemoryVolumeSize must hold the run's ramdisk.
Before, readiness only checked that an object of that name existed."""

from __future__ import annotations

import copy

import jsonschema
import pytest
import yaml

from mtc_provider.core.definition.checkpoint_config import build_checkpoint_configuration
from mtc_provider.core.definition.configuration_match import configuration_mismatches, quantity_bytes
from mtc_provider.core.definition.readiness import (configuration_check, evaluate_cluster, evaluate_kubernetes,
                                                    run_ramdisk)
from mtc_provider.core.definition.sizing import ramdisk_size
from mtc_provider.core.definition.tpu import SliceSpec
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
    assert configuration_mismatches(_valid(SERVING), "ct6e-standard-4t", "ckpts", RAMDISK) == []
    check = configuration_check(SERVING, "cfg", SLICES, "ckpts", RAMDISK)
    assert check.ok and check.observed == "cfg (bucket ckpts)"


@pytest.mark.parametrize("spec, field, value, expected", [
    ({"nodeSelector": {"node.kubernetes.io/instance-type": "ct5p-hightpu-4t"}},
     "spec.nodeSelector[node.kubernetes.io/instance-type]", "'ct5p-hightpu-4t'", "expected 'ct6e-standard-4t'"),
    ({"nodeSelector": {"cloud.google.com/gke-nodepool": "pool-0"}},
     "spec.nodeSelector[node.kubernetes.io/instance-type]", "None", "expected 'ct6e-standard-4t'"),
    ({"cloudStorageBucketName": "someone-elses"}, "spec.cloudStorageBucketName", "'someone-elses'",
     "expected 'ckpts', the run's bucket"),
    ({"inMemoryVolumeSize": "100Gi"}, "spec.inMemoryVolumeSize", "'100Gi'", "expected at least 225Gi"),
])
def test_each_mismatch_names_field_value_and_what_the_run_expects(spec, field, value, expected):
    problems = configuration_mismatches(_with(**spec), "ct6e-standard-4t", "ckpts", RAMDISK)
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
    problems = configuration_mismatches(_valid(example), "ct6e-standard-4t", "ckpts", RAMDISK)
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
