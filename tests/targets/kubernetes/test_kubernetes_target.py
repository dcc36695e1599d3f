"""A plain Kubernetes target: any cluster with JobSet installed, through an Airflow Kubernetes connection.

The cluster here is the local target's API server, reached only through the connection's kubeconfig (the
cncf.kubernetes provider's `kube_config_path` extra), exactly as a user's own cluster would be. Kubernetes
discovery answers 404 for an API group the cluster does not serve
(https://kubernetes.io/docs/reference/using-api/api-concepts/#discovery-apis).
"""

from __future__ import annotations

import json

import pytest
from airflow.sdk.exceptions import AirflowFailException

from mtc_provider import targets
from mtc_provider.targets.kubernetes.backend import served_resources
from mtc_local.target.cluster import running_kubeconfig
from mtc_provider.targets import backend_for
from mtc_provider.core.basics.errors import NotReady, SpecError
from mtc_provider.operators.gcp import (
    MtcApplyCheckpointConfigurationOperator,
    MtcClusterReadinessOperator,
    MtcCreateTpuNodePoolsOperator,
    MtcEnableCheckpointingOperator,
)
from mtc_provider.operators.jobset import MtcJobSetOperator
from mtc_provider.target import KubernetesTarget, target_from_dict
from tests.doubles.kubernetes import KubernetesApiDouble
from tests.support.js_helpers import FakeTI

SLICES = {"tpu_type": "v6e", "topology": "2x2", "num_slices": 2, "machine_type": "ct6e-standard-4t"}
CONN = "k8s_own_cluster"


class TI:
    task_id = "t"

    def __init__(self) -> None:
        self.xcoms: dict[str, object] = {}

    def xcom_push(self, key: str, value: object) -> None:
        self.xcoms[key] = value


@pytest.fixture
def connection(home: str, monkeypatch: pytest.MonkeyPatch) -> KubernetesTarget:
    """An Airflow Kubernetes connection to the cluster; the target names only the connection."""
    kubeconfig = running_kubeconfig(home)
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN.upper()}",
                       json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}))
    return KubernetesTarget(kubernetes_conn_id=CONN)


def test_readiness_names_the_missing_configuration_then_passes_once_it_is_applied(connection: KubernetesTarget):
    ready = MtcClusterReadinessOperator(task_id="ready", target=connection, slices=SLICES,
                                        checkpoint_configuration_name="mtc-config")
    with pytest.raises(NotReady) as missing:
        ready.execute({"ti": TI()})
    failed = [check["name"] for check in missing.value.report if not check["ok"]]
    assert failed == ["checkpoint_configuration"]  # JobSet and the CRD are served: only the object is missing

    applied = MtcApplyCheckpointConfigurationOperator(
        task_id="apply", target=connection, name="mtc-config", bucket_name="ckpt-bucket", slices=SLICES,
        sizing={"parameters": 1e8}).execute({"ti": TI()})
    assert (applied["target"], applied["action"]) == ("kubernetes", "created")

    ti = TI()
    report = ready.execute({"ti": ti})
    assert report["ready"] and ti.xcoms["readiness"]["target"] == "kubernetes"
    assert {c["name"] for c in report["checks"]} == {"jobset_api", "checkpoint_configuration_api", "jobset_version",
                                                     "checkpoint_configuration", "rbac_jobsets", "rbac_pods",
                                                     "rbac_pods_log", "rbac_events", "rbac_configmaps"}
    assert "mtc_gke_cluster" not in ti.xcoms  # no Cloud Console for a plain cluster


def test_readiness_cross_checks_the_configuration_against_the_run(connection: KubernetesTarget):
    """Issue 32 (4): an existing CheckpointConfiguration that backs up to another bucket, selects other nodes or is
    smaller than the run's ramdisk fails readiness, each field named with its value and what the run expects
    (read through the real client from the local API server, which validates it against the CRD)."""
    MtcApplyCheckpointConfigurationOperator(
        task_id="apply", target=connection, name="mtc-config", bucket_name="ckpt-bucket", slices=SLICES,
        sizing={"parameters": 1e8}).execute({"ti": TI()})  # 3Gi per host, for ct6e-standard-4t, to ckpt-bucket

    def failed(**run) -> str:
        ready = MtcClusterReadinessOperator(task_id="ready", target=connection, checkpoint_configuration_name="mtc-config",
                                            **{"slices": SLICES, **run})
        with pytest.raises(NotReady) as refused:
            ready.execute({"ti": TI()})
        bad = [check for check in refused.value.report if not check["ok"]]
        assert [check["name"] for check in bad] == ["checkpoint_configuration"], bad
        return bad[0]["observed"]

    assert "spec.cloudStorageBucketName: 'ckpt-bucket'; expected 'other-bucket'" in failed(bucket_name="other-bucket")
    assert "spec.inMemoryVolumeSize: '3Gi'; expected at least 26Gi" in failed(sizing={"parameters": 1e9})
    v5e = {"tpu_type": "v5e", "topology": "2x2", "num_slices": 2, "machine_type": "ct5lp-hightpu-4t"}
    assert ("spec.nodeSelector[node.kubernetes.io/instance-type]: 'ct6e-standard-4t'" in failed(slices=v5e))
    report = MtcClusterReadinessOperator(task_id="ready", target=connection, slices=SLICES, bucket_name="ckpt-bucket",
                                         sizing={"parameters": 1e8},
                                         checkpoint_configuration_name="mtc-config").execute({"ti": TI()})
    assert report["ready"]


def test_readiness_refuses_a_bad_bucket_name_before_any_call(connection: KubernetesTarget):
    from mtc_provider.core.basics.errors import SpecError

    with pytest.raises(SpecError, match="bucket_name: 'gs://ckpt-bucket'"):
        MtcClusterReadinessOperator(task_id="ready", target=connection, slices=SLICES, bucket_name="gs://ckpt-bucket",
                                    checkpoint_configuration_name="mtc-config").execute({"ti": TI()})


def test_jobsets_go_through_the_connection(connection: KubernetesTarget):
    details = targets.connection_for(connection)
    assert details == {"kind": "kubernetes", "kubernetes_conn_id": CONN}  # no token, no server address
    assert targets.jobset_api(details).list("default", "app=nothing-here") == []


def test_managed_steps_say_why_they_do_not_apply(connection: KubernetesTarget):
    for operator in (MtcEnableCheckpointingOperator(task_id="e", target=connection),
                     MtcCreateTpuNodePoolsOperator(task_id="p", target=connection, slices=SLICES)):
        result = operator.execute({"ti": TI()})
        assert result["applies"] is False and result["target"] == "kubernetes"
        assert "Kubernetes connection" in result["reason"] and "gke target" in result["reason"]


def test_a_fault_plan_is_refused_on_a_kubernetes_target_before_any_call():
    launch = MtcJobSetOperator(
        task_id="train", target={"kind": "kubernetes", "kubernetes_conn_id": "nowhere"}, slices=SLICES,
        checkpointing={"run_name": "r", "base_output_directory": "gs://b/runs", "steps": 10},
        workload={"jobset_name": "r", "image": "us-docker.pkg.dev/p/r/maxtext:1"},
        fault_plan=[{"kind": "sigkill", "at_step": 3, "slice": 0, "host": 0}])
    with pytest.raises(AirflowFailException, match="fault_plan.*kubernetes target"):
        launch.execute({"ti": FakeTI()})


def test_a_cluster_without_jobset_is_reported_with_the_install_command():
    from kubernetes import client as k8s

    from mtc_provider.core.definition.cluster.readiness import evaluate_kubernetes

    # A cluster without JobSet installed: discovery of jobset.x-k8s.io/v1alpha2 is a 404 (tests/doubles/kubernetes.py).
    with KubernetesApiDouble(served={"checkpointconfigurations", "configmaps", "pods"}) as server:
        served = served_resources(k8s.ApiClient(k8s.Configuration(host=server.url)))
    assert served == {"jobsets.jobset.x-k8s.io/v1alpha2": False,
                      "checkpointconfigurations.checkpointing.gke.io/v1": True}
    jobset = evaluate_kubernetes(served)[0]
    assert (jobset.name, jobset.ok) == ("jobset_api", False) and "jobset" in jobset.fix and "kubectl apply" in jobset.fix


def test_target_dicts_name_the_bad_field_and_the_allowed_values():
    assert isinstance(target_from_dict({"kind": "kubernetes", "kubernetes_conn_id": "c"}), KubernetesTarget)
    with pytest.raises(SpecError, match="target.kind.*gke or kubernetes or local"):
        target_from_dict({"kind": "eks"})
    with pytest.raises(SpecError, match="target.cluster_name.*kubernetes_conn_id"):
        target_from_dict({"kind": "kubernetes", "cluster_name": "x"})
    with pytest.raises(SpecError, match="target.kubernetes_conn_id"):
        KubernetesTarget(kubernetes_conn_id="")


def test_every_kind_has_a_backend_with_the_same_small_protocols():
    from mtc_provider.adapters.protocols import ClusterControl, TargetBackend

    for target in ({"kind": "local", "home": "/nonexistent"}, {"kind": "kubernetes", "kubernetes_conn_id": "c"},
                   {"kind": "gke", "project_id": "p", "location": "us-central1", "cluster_name": "c"}):
        backend = backend_for(target)
        assert isinstance(backend, TargetBackend) and isinstance(backend.cluster, ClusterControl), target
    assert backend_for({"kind": "gke", "project_id": "p", "location": "l", "cluster_name": "c"}).console is not None
    body, plan = {"metadata": {}}, [{"kind": "hang", "at_step": 3, "slice": 0}]
    backend_for({"kind": "local"}).put_fault_plan(body, plan)
    assert json.loads(body["metadata"]["annotations"]["mtc.local/fault-plan"]) == plan
    with pytest.raises(SpecError, match="empty on the kubernetes target"):
        backend_for({"kind": "kubernetes", "kubernetes_conn_id": "c"}).put_fault_plan(body, plan)
