"""Google-style connection parameters on the launch operator (issue 11, defect 11): gcp_conn_id,
impersonation_chain and project_id are top-level, templated, and honoured by every call: the cluster, the
trigger's checkpoint listing (never google_cloud_default), the operator's own GCS reads, the goodput report; the
project falls back to the connection's, as the google provider's operators do (GoogleBaseHook.project_id)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from airflow.sdk.exceptions import TaskDeferred

from mtc_provider.adapters import jobset_factory
from tests.doubles.memory_jobset import AsyncMemoryJobSetApi, MemoryJobSetApi, MemoryJobSetCluster
from mtc_provider.core.errors import SpecError
from mtc_provider.operators.jobset import MtcJobSetOperator
from mtc_provider.target import GkeTarget, resolve_project

sys.path.insert(0, str(Path(__file__).parents[1] / "jobset"))
from js_helpers import FakeTI  # noqa: E402

CHAIN = ["sa-train@proj.iam.gserviceaccount.com"]


@pytest.fixture
def gke_cluster(monkeypatch):
    cluster = MemoryJobSetCluster()
    monkeypatch.setenv("AIRFLOW_CONN_MTC_TRAIN_GCP", json.dumps(
        {"conn_type": "google_cloud_platform", "extra": {"project": "proj-from-connection"}}))
    with jobset_factory.registered("gke", lambda c: MemoryJobSetApi(cluster), lambda c: AsyncMemoryJobSetApi(cluster)):
        yield cluster


def _launch(**kwargs) -> MtcJobSetOperator:
    return MtcJobSetOperator(
        task_id="train", slices={"tpu_type": "v6e", "topology": "2x4", "num_slices": 2},  # GKE: multi-host
        checkpointing={"run_name": "llama", "base_output_directory": "gs://ckpt/out", "steps": 100,
                       "checkpoint_period": 20},
        workload={"jobset_name": "train", "image": "gcr.io/p/maxtext:1"},
        target={"kind": "gke", "project_id": "", "location": "us-east5", "cluster_name": "tpu"},
        checkpoint_store_factory=lambda directory, conn_id: _NoCheckpoints(), deferrable=True, **kwargs)


class _NoCheckpoints:
    def latest_step(self, checkpoint_dir):
        return None


def test_impersonation_reaches_the_trigger_listing_and_every_gcs_read(gke_cluster):
    op = _launch(gcp_conn_id="mtc_train_gcp", impersonation_chain=CHAIN, stall_timeout=600)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({"ti": FakeTI(), "run_id": "run-1"})
    trigger = deferred.value.trigger
    assert (trigger.gcp_conn_id, trigger.impersonation_chain) == ("mtc_train_gcp", CHAIN)
    _, kwargs = trigger.serialize()
    assert kwargs["gcp_conn_id"] == "mtc_train_gcp" and kwargs["impersonation_chain"] == CHAIN
    op.checkpoint_store_factory = None
    hook = op._store("gs://ckpt/out/llama/checkpoints").hook  # the operator's own reads
    assert (hook.gcp_conn_id, hook.impersonation_chain) == ("mtc_train_gcp", CHAIN)
    assert op._target().project_id == "proj-from-connection"  # the connection's project, the target had none


def test_impersonation_parameters_are_templated():
    assert {"gcp_conn_id", "impersonation_chain", "project_id"} <= set(MtcJobSetOperator.template_fields)


def test_impersonation_project_falls_back_to_the_connection_or_says_what_is_missing(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_MTC_TRAIN_GCP", json.dumps(
        {"conn_type": "google_cloud_platform", "extra": {"project": "p1"}}))
    monkeypatch.setenv("AIRFLOW_CONN_MTC_NO_PROJECT", json.dumps({"conn_type": "google_cloud_platform"}))
    assert resolve_project(GkeTarget(None, "us-east5", "tpu", gcp_conn_id="mtc_train_gcp")).project_id == "p1"
    assert resolve_project(GkeTarget("mine", "us-east5", "tpu", gcp_conn_id="mtc_train_gcp")).project_id == "mine"
    with pytest.raises(SpecError, match="target.project_id"):
        resolve_project(GkeTarget(None, "us-east5", "tpu", gcp_conn_id="mtc_no_project"))


def test_impersonation_dns_endpoint_is_offered_and_exclusive_with_internal_ip():
    assert GkeTarget("p", "us-east5", "tpu", use_dns_endpoint=True).to_dict()["use_dns_endpoint"] is True
    with pytest.raises(SpecError, match="use_dns_endpoint"):
        GkeTarget("p", "us-east5", "tpu", use_dns_endpoint=True, use_internal_ip=True)
