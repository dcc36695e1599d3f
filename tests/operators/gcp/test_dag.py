"""The six jobs chained in real Airflow DAGs (dag.test on SQLite): GKE against the fakes, then the local target.

The DAGs live in tests/operators/gcp/dags (dag.test needs them in a bundle); a second run must change nothing.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
from pathlib import Path

import pytest

from mtc_provider.core.definition.cluster.iam import BUCKET_ROLE, bucket_members
from mtc_provider.operators.gcp import (
    MtcApplyCheckpointConfigurationOperator,
    MtcCreateBucketOperator,
    MtcCreateTpuNodePoolsOperator,
    MtcGrantBucketAccessOperator,
)
from mtc_provider.target import GkeTarget, LocalTarget

from tests.support.gcp_fixtures import CLUSTER, LOCATION, NUMBER, PROJECT

DAGS = Path(__file__).parent / "dags"
SLICES = {"tpu_type": "v6e", "topology": "4x8", "num_slices": 2, "machine_type": "ct6e-standard-4t"}


def day(n: int) -> datetime.datetime:
    return datetime.datetime(2026, 1, n, tzinfo=datetime.timezone.utc)


@pytest.fixture
def dags(monkeypatch, tmp_path, airflow_db):
    """Load the DAG file after the fakes' URLs are in the environment; dag.test syncs it from this bundle."""

    def load(container_url: str = "http://127.0.0.1:9"):
        monkeypatch.setenv("MTC_TEST_CONTAINER_URL", container_url)
        monkeypatch.setenv("MTC_TEST_LOCAL_HOME", str(tmp_path))
        monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps([
            {"name": "mtc-gcp-tests", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
             "kwargs": {"path": str(DAGS)}}]))
        spec = importlib.util.spec_from_file_location("mtc_gcp_dags", DAGS / "mtc_gcp_dags.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


def writes(container, gcs, k8s):
    return container.writes, gcs.bucket_writes, gcs.policy_writes, k8s.writes


def test_gke_setup_dag_then_second_run_changes_nothing(dags, container, gcs, k8s, gcp_connection):
    dag = dags(container.url).gke_setup
    first = dag.test(logical_date=day(1))
    assert first.state == "success", [(ti.task_id, ti.state) for ti in first.get_task_instances()]
    cluster = container.clusters[f"{PROJECT}/{LOCATION}/{CLUSTER}"]
    assert cluster["workloadIdentityConfig"]["workloadPool"] == f"{PROJECT}.svc.id.goog"
    assert [p["name"] for p in cluster["nodePools"]] == ["mtc-slice-0", "mtc-slice-1"]
    assert gcs.buckets["ckpt"]["hierarchicalNamespace"]["enabled"]
    binding = next(b for b in gcs.policies["ckpt"]["bindings"] if b["role"] == BUCKET_ROLE)
    # What `mtc plan` lists is exactly what the operator bound.
    assert binding["members"] == sorted(bucket_members(PROJECT, NUMBER, "training", "trainer"))
    assert binding["members"] == sorted(_planned_members())
    assert k8s.checkpoint_configurations["mtc-config"]["spec"]["cloudStorageBucketName"] == "ckpt"
    assert container.writes == 4  # two cluster updates, two node pools
    before = writes(container, gcs, k8s)

    second = dag.test(logical_date=day(2))
    assert second.state == "success"
    assert writes(container, gcs, k8s) == before


def test_setup_dag_on_the_minimum_version_refuses_before_any_change(dags, container, gcs, k8s, gcp_connection):
    """At exactly 1.32.3-gke.1170000 (the guide wants later) the first task refuses: no cluster update, no
    bucket, no IAM change, no node pool, no CheckpointConfiguration."""
    container.clusters[f"{PROJECT}/{LOCATION}/{CLUSTER}"]["currentMasterVersion"] = "1.32.3-gke.1170000"
    run = dags(container.url).gke_setup.test(logical_date=day(5))
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert run.state == "failed" and states["readiness"] == "failed", states
    assert writes(container, gcs, k8s) == (0, 0, 0, 0)
    # Readiness only reads the JobSet CRD (its version) and asks SelfSubjectAccessReviews (the RBAC checks): no writes.
    crd = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/jobsets.jobset.x-k8s.io"
    assert gcs.requests == [] and [(r.method, r.path) for r in k8s.requests
                                   if "/selfsubjectaccessreviews" not in r.path] == [("GET", crd)]


def test_readiness_operator_fails_at_once_with_the_report(dags, container, gcp_connection):
    run = dags(container.url).not_ready.test(logical_date=day(3))
    assert run.state == "failed"


def test_local_target_dag(dags, tmp_path, capfd):
    from mtc_local.cluster.lifecycle import stop

    try:
        run = dags().local_setup.test(logical_date=day(4))
    finally:
        stop(tmp_path)  # the CheckpointConfiguration went to the local cluster: stop it
    assert run.state == "success", [(ti.task_id, ti.state) for ti in run.get_task_instances()]
    assert (tmp_path / "buckets" / "ckpt").is_dir()
    # At each task's end Airflow asks every extra link for its URL, the cluster and bucket links the local target
    # never sets included: reading them must not log "XCom not found" errors (issue 35 item 13: twice per task).
    logged = capfd.readouterr()
    assert "XCom not found" not in logged.out + logged.err
    assert "Setting xcom for operator extra link" in logged.out + logged.err or "ready" in logged.out + logged.err


def test_local_bucket_and_iam_go_through_the_local_gcs_and_node_pools_do_not_apply(tmp_path):
    """The bucket and IAM steps run GcsBucketApi against the local GCS (HNS, UBLA, the v3 policy); node pools
    have no local meaning."""
    from mtc_local.target.gcs import local_gcs_hook
    from mtc_local import gcs as local_gcs

    target = LocalTarget(home=str(tmp_path))
    bucket = MtcCreateBucketOperator(task_id="b", target=target, bucket_name="ckpt")
    first = bucket.execute({})
    assert first["changed"] is True and first["hierarchical_namespace"] and first["uniform_bucket_level_access"]
    assert bucket.execute({})["changed"] is False
    grant = MtcGrantBucketAccessOperator(task_id="g", target=target, bucket_name="ckpt", workload_namespace="training")
    added = grant.execute({})
    assert added["changed"] and any("/ns/training/sa/default" in m for m in added["added"])
    assert grant.execute({})["changed"] is False
    client = local_gcs_hook(str(tmp_path)).get_conn()  # the home's token (the local GCS refuses anonymous calls)
    policy = client.bucket("ckpt").get_iam_policy(requested_policy_version=3)
    assert sorted(policy[BUCKET_ROLE]) == sorted(added["added"])
    pools = MtcCreateTpuNodePoolsOperator(task_id="p", target=target, slices=SLICES).execute({})
    assert pools["applies"] is False and "16 host processes" in pools["reason"]
    assert local_gcs.stop(str(tmp_path))


def test_checkpoint_configuration_is_applied_to_the_local_cluster(tmp_path):
    """The same apply as on GKE (CheckpointConfigurationApi), validated against the CRD by the local API server."""
    from mtc_local.cluster.client import LocalCluster
    from mtc_local.cluster.lifecycle import stop

    op = MtcApplyCheckpointConfigurationOperator(task_id="c", target=LocalTarget(home=str(tmp_path)),
                                                 name="mtc-config", bucket_name="ckpt", slices=SLICES)
    try:
        first, second = op.execute({}), op.execute({})
        from kubernetes import client as k8s

        with LocalCluster(tmp_path).client_factory() as api_client:
            stored = k8s.CustomObjectsApi(api_client).get_cluster_custom_object(
                "checkpointing.gke.io", "v1", "checkpointconfigurations", "mtc-config")
    finally:
        stop(tmp_path)
    assert (first["target"], first["action"], second["action"]) == ("local", "created", "unchanged")
    assert stored["spec"]["cloudStorageBucketName"] == "ckpt"


def test_zone_bucket_location_fails_before_any_call(gcs, gcp_connection):
    from mtc_provider.core.basics.errors import SpecError

    op = MtcCreateBucketOperator(task_id="b", target=GkeTarget(PROJECT, LOCATION, CLUSTER), bucket_name="ckpt",
                                 bucket_location="us-central1-a")
    with pytest.raises(SpecError, match="zone of region us-central1"):
        op.execute({})
    assert gcs.requests == []


def _planned_members() -> list[str]:
    """The members `mtc plan` prints for the same cluster, bucket and workload identity."""
    import yaml
    from typer.testing import CliRunner

    from mtc_provider.cli.app import app
    from mtc_provider.core.definition.cluster.iam import CHECKPOINTING_KSA

    config = {
        "target": "gke",
        "cluster": {"project_id": PROJECT, "location": LOCATION, "name": CLUSTER},
        "bucket": {"name": "ckpt", "location": "us-central1"},
        "slices": {"tpu_type": "v6e", "topology": "4x8", "num_slices": 2},
        "checkpointing": {"run_name": "run", "base_output_directory": "gs://ckpt", "steps": 100},
        "workload": {"jobset_name": "run", "namespace": "training", "service_account": "trainer"},
    }
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.yaml"
        path.write_text(yaml.safe_dump(config))
        result = CliRunner().invoke(app, ["plan", str(path), "--project-number", NUMBER], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    members = sorted({word.strip("`'\",") for word in result.output.split() if word.startswith("principal://")})
    assert len(members) == 2 and any(CHECKPOINTING_KSA in m for m in members), result.output
    return members
