from __future__ import annotations

import pytest
from core_helpers import gke_config, local_config, run_config

from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.definition.description.plan import PROJECT_NUMBER_PLACEHOLDER, build_plan
from mtc_provider.core.definition.description.spec import RunConfig


def test_gke_plan_lists_checks_creates_binds_and_size() -> None:
    plan = build_plan(run_config(), project_number="123456789012")
    assert [step.name for step in plan.checks] == ["addons", "workload-pool", "version", "standard-cluster", "tpu-node-pools"]
    sections = plan.lines()
    assert ("version: GKE version 1.32.4-gke.1415000 or later to enable MTC (later than 1.32.3-gke.1170000 where "
            "its addon already runs)") in sections["checks"]
    assert any("Autopilot is not supported" in line for line in sections["checks"])
    assert any(">= 2 TPU node pools of machine type ct6e-standard-4t and topology 4x8" in line for line in sections["checks"])
    assert [step.name for step in plan.creates] == ["bucket", "checkpoint-configuration", "jobset"]
    assert plan.ramdisk.hosts_per_slice == 8 and plan.ramdisk.quantity == "225Gi"
    assert "inMemoryVolumeSize 225Gi" in sections["creates"][1]
    assert {b.role for b in plan.binds} == {"roles/storage.objectUser"} and {b.resource for b in plan.binds} == {"gs://my-bucket"}
    assert plan.members == [
        "principal://iam.googleapis.com/projects/123456789012/locations/global/workloadIdentityPools/my-project.svc.id.goog"
        "/subject/ns/gke-managed-checkpointing/sa/gke-checkpointing-multitier-node",
        "principal://iam.googleapis.com/projects/123456789012/locations/global/workloadIdentityPools/my-project.svc.id.goog"
        "/subject/ns/default/sa/default",
    ]
    assert [m["kind"] for m in plan.manifests] == ["CheckpointConfiguration", "JobSet"]
    assert plan.manifests[0]["spec"]["inMemoryVolumeSize"] == "225Gi"


@pytest.mark.parametrize(
    "argument, in_config, expected",
    [(None, "", PROJECT_NUMBER_PLACEHOLDER), (None, "42", "42"), ("7", "42", "7")],
)
def test_project_number_sources(argument, in_config, expected) -> None:
    data = gke_config(cluster={"project_number": in_config} if in_config else {})
    plan = build_plan(RunConfig.from_dict(data), project_number=argument)
    assert all(member.startswith(f"principal://iam.googleapis.com/projects/{expected}/locations/global/") for member in plan.members)


def test_bad_project_number() -> None:
    with pytest.raises(SpecError) as caught:
        build_plan(run_config(), project_number="my-project")
    assert caught.value.field == "cluster.project_number" and "digits" in caught.value.allowed


def test_output_directory_must_be_in_the_run_bucket() -> None:
    with pytest.raises(SpecError) as caught:
        build_plan(run_config(checkpointing={"base_output_directory": "gs://other-bucket/out"}))
    assert caught.value.field == "checkpointing.base_output_directory"
    assert "gs://my-bucket/" in caught.value.allowed


def test_sizing_errors_surface_through_the_plan() -> None:
    with pytest.raises(SpecError) as caught:
        build_plan(run_config(sizing={"buffer": 0.3}))
    assert caught.value.field == "sizing.buffer"


def test_local_plan_says_what_does_not_apply() -> None:
    plan = build_plan(RunConfig.from_dict(local_config()))
    assert plan.target == "local"
    assert [m["kind"] for m in plan.manifests] == ["JobSet"]
    assert plan.binds == ()
    assert [step.name for step in plan.checks] == ["tpu-node-pools"]
    skipped = plan.lines()["not applicable locally"]
    for name in ("addons", "workload-pool", "version", "standard-cluster", "bucket", "checkpoint-configuration", "iam"):
        assert any(line.startswith(f"{name}:") for line in skipped), name
    assert plan.lines()["checks"] == ["tpu-node-pools: 2 x 8 local processes"]
