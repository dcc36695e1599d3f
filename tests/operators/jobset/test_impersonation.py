"""Google-style connection parameters on the launch operator (issue 11, defect 11): gcp_conn_id,
impersonation_chain and project_id are top-level, templated, and honoured by every call: the cluster, the
trigger's checkpoint listing (never google_cloud_default), the operator's own GCS reads, the goodput report; the
project falls back to the connection's, as the google provider's operators do (GoogleBaseHook.project_id)."""

from __future__ import annotations

import json

import pytest
from airflow.sdk.exceptions import TaskDeferred

from mtc_provider import targets
from tests.doubles.memory_jobset import AsyncMemoryJobSetApi, MemoryJobSetApi, MemoryJobSetCluster
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.operators.jobset import MtcJobSetOperator
from mtc_provider.targets.gke.target import GkeTarget, resolve_project

from tests.support.gcp_fixtures import fast_retry  # noqa: F401  (autouse, as in its former tests/gcp)
from tests.support.js_helpers import FakeTI

CHAIN = ["sa-train@proj.iam.gserviceaccount.com"]


@pytest.fixture
def gke_cluster(monkeypatch):
    cluster = MemoryJobSetCluster()
    monkeypatch.setenv("AIRFLOW_CONN_MTC_TRAIN_GCP", json.dumps(
        {"conn_type": "google_cloud_platform", "extra": {"project": "proj-from-connection"}}))
    with targets.registered_jobset_api("gke", lambda c: MemoryJobSetApi(cluster), lambda c: AsyncMemoryJobSetApi(cluster)):
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
    def finalized(self, checkpoint_dir, after=None):
        return []


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


# --- the google provider's parameter names on the launch, delete and sensor (issue 27) --------------------------
# GKEStartJobOperator takes project_id, location, cluster_name, gcp_conn_id, impersonation_chain, use_dns_endpoint
# (airflow/providers/google/cloud/operators/kubernetes_engine.py in apache-airflow-providers-google, pinned in .venv).
GOOGLE_STYLE = {"project_id": "proj-a", "location": "us-east5", "cluster_name": "tpu", "gcp_conn_id": "mtc_train_gcp",
                "impersonation_chain": CHAIN, "use_dns_endpoint": True}


def _launch_google_style(**kwargs) -> MtcJobSetOperator:
    op = _launch(**kwargs)
    op.target = None  # _launch's default target; these tests name the cluster by the google parameters only
    return op


def test_google_parameters_without_target_name_the_gke_cluster_of_the_launch(gke_cluster):
    op = _launch_google_style(**GOOGLE_STYLE)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({"ti": FakeTI(), "run_id": "run-1"})
    connection = deferred.value.trigger.connection  # what the triggerer reaches the cluster with
    assert {k: connection[k] for k in GOOGLE_STYLE} == GOOGLE_STYLE
    assert connection["kind"] == "gke"
    assert len(gke_cluster.live()) == 1  # submitted there


def test_google_parameters_conflicting_with_the_target_fail_naming_both_before_any_call(gke_cluster):
    from airflow.sdk.exceptions import AirflowFailException

    op = _launch(cluster_name="other-cluster")  # _launch's target names cluster "tpu"
    with pytest.raises(AirflowFailException, match=r"cluster_name.*'other-cluster'.*target\.cluster_name='tpu'"):
        op.execute({"ti": FakeTI(), "run_id": "run-1"})
    assert gke_cluster.present() == []  # nothing was submitted


def test_google_parameters_agreeing_with_the_target_are_accepted(gke_cluster):
    op = _launch(location="us-east5", cluster_name="tpu", gcp_conn_id="mtc_train_gcp")
    assert (op._target().cluster_name, op._target().location) == ("tpu", "us-east5")


@pytest.mark.parametrize("extra, field", [
    ({"location": "us-east5"}, "cluster_name"),  # half a cluster name
    ({"location": "us-east5", "cluster_name": "tpu", "kubernetes_conn_id": "k8s"}, "location"),
])
def test_google_parameters_incomplete_or_beside_a_kubernetes_connection_are_refused(gke_cluster, extra, field):
    from airflow.sdk.exceptions import AirflowFailException

    op = _launch_google_style(gcp_conn_id="mtc_train_gcp", **extra)
    with pytest.raises(AirflowFailException, match=field):
        op.execute({"ti": FakeTI(), "run_id": "run-1"})
    assert gke_cluster.present() == []


def test_google_parameters_and_impersonation_reach_the_delete_operator_and_the_jobset_sensor(gke_cluster):
    from mtc_provider.operators.jobset import MtcDeleteJobSetOperator
    from mtc_provider.sensors.jobset import MtcJobSetSensor

    delete = MtcDeleteJobSetOperator(task_id="d", name="gone", **GOOGLE_STYLE)
    sensor = MtcJobSetSensor(task_id="s", name="gone", **GOOGLE_STYLE)
    for task in (delete, sensor):
        connection = task._connection()
        assert {k: connection[k] for k in GOOGLE_STYLE} == GOOGLE_STYLE, type(task).__name__
    assert delete.execute({"ti": FakeTI()}) == ["gone"]  # the memory cluster's delete of an absent JobSet is a no-op
    local = MtcJobSetSensor(task_id="s2", name="x", target={"kind": "local", "home": "/tmp/x"}, cluster_name="tpu",
                            location="us-east5")
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException, match="cluster_name|location"):
        local._connection()


def test_google_parameters_render_from_templates_with_the_real_operator(gke_cluster):
    """Airflow renders template_fields (BaseOperator.render_template_fields); a rendered flag arrives as text."""
    op = _launch_google_style(project_id="{{ params.project }}", location="{{ params.location }}",
                              cluster_name="{{ params.cluster }}", use_dns_endpoint="{{ params.dns }}",
                              gcp_conn_id="mtc_train_gcp", crash_loop_attempts="{{ params.loops }}",
                              wait_for="{{ params.wait }}", deletion_timeout="{{ params.deletion }}")
    op.render_template_fields({"params": {"project": "proj-t", "location": "us-east5", "cluster": "tpu",
                                          "dns": True, "loops": 4, "wait": "checkpoint", "deletion": 60}})
    op._specs()  # validates (and converts) the rendered values
    target = op._target()
    assert (target.project_id, target.location, target.cluster_name, target.use_dns_endpoint) == (
        "proj-t", "us-east5", "tpu", True)
    options = op._options  # the settings, parsed once from the rendered fields (core.attempt.launch_options)
    assert (options.crash_loop_attempts, options.wait_for, options.times.deletion_timeout) == (4, "checkpoint", 60.0)
