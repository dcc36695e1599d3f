"""The local cluster's API server, driven by the real kubernetes client and the machine's kubectl, with real pods.

Each behaviour is the documented one of a Kubernetes API server:
- Status errors: https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/status/
- CRD validation (422): https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#validation
- cascading deletion: https://kubernetes.io/docs/concepts/architecture/garbage-collection/#cascading-deletion
- watch, 410 Gone: https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes
- pod logs: https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/#read-log-of-the-specified-pod
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config, watch
from kubernetes.client.rest import ApiException

from mtc_local.cluster.lifecycle import ensure_running, stop
from tests.support.local_cluster import make_jobset, wait_for

NS = "default"
GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
KUBECTL = shutil.which("kubectl")


def _objects(api_client) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(api_client)


def _status(err: ApiException) -> dict:
    return json.loads(err.body)


def _pods(api_client, name: str) -> list:
    return k8s.CoreV1Api(api_client).list_namespaced_pod(NS, label_selector=f"{JOBSET_LABEL}={name}").items


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None, timeout: float = 60) -> str:
    if KUBECTL is None:
        pytest.fail("kubectl is missing on this machine (Debian: apt-get install kubernetes-client)")
    done = subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), *args], input=stdin, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_kubeconfig_is_private_and_a_wrong_token_is_401(kubeconfig, api_client, tmp_path):
    assert kubeconfig.stat().st_mode & 0o077 == 0
    assert [ns.metadata.name for ns in k8s.CoreV1Api(api_client).list_namespace().items] == [
        "default", "kube-public", "kube-system"]
    wrong = yaml.safe_load(kubeconfig.read_text())
    wrong["users"][0]["user"]["token"] = "wrong"
    (tmp_path / "wrong").write_text(yaml.safe_dump(wrong))
    with config.new_client_from_config(config_file=str(tmp_path / "wrong")) as stranger:
        with pytest.raises(ApiException) as err:
            k8s.CoreV1Api(stranger).list_namespace()
    assert (err.value.status, _status(err.value)["reason"]) == (401, "Unauthorized")


def test_jobset_runs_as_pods_with_jobset_labels_phases_and_logs(api_client, workload):
    created = _objects(api_client).create_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, make_jobset("run", workload, args=["steps=3"]))
    assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]
    done = wait_for(lambda: (o := _objects(api_client).get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "run"))
                    ["status"].get("terminalState") and o)
    assert done["status"]["conditions"][0]["reason"] == "AllJobsCompleted"
    pods = _pods(api_client, "run")
    assert sorted(p.metadata.labels["jobset.sigs.k8s.io/job-index"] for p in pods) == ["0", "1"]
    assert {p.metadata.name.rsplit("-", 1)[0] for p in pods} == {"run-slice-0-0", "run-slice-1-0"}
    assert {(p.status.phase, p.status.container_statuses[0].state.terminated.exit_code,
             p.status.container_statuses[0].state.terminated.reason) for p in pods} == {("Succeeded", 0, "Completed")}
    log = k8s.CoreV1Api(api_client).read_namespaced_pod_log(pods[0].metadata.name, NS, tail_lines=1,
                                                            _preload_content=False).data.decode()
    assert log.startswith("completed step: 3")
    stamped = k8s.CoreV1Api(api_client).read_namespaced_pod_log(pods[0].metadata.name, NS, timestamps=True,
                                                               _preload_content=False).data.decode()
    # The kubelet's fixed-width RFC 3339 timestamps with nanoseconds, then the line.
    assert all(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z (completed step|env )", line)
               for line in stamped.splitlines())


def test_failed_pod_reports_its_exit_code_and_error_reason(api_client, workload):
    _objects(api_client).create_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, make_jobset("bug", workload, args=["steps=5", "fail_at=1", "fail_code=3"]))
    wait_for(lambda: _objects(api_client).get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "bug")
             ["status"].get("terminalState") == "Failed")
    failed = [p for p in _pods(api_client, "bug") if p.status.phase == "Failed"]
    assert failed and failed[0].status.container_statuses[0].state.terminated.exit_code == 3
    assert failed[0].status.container_statuses[0].state.terminated.reason == "Error"


def test_invalid_jobset_is_422_naming_the_field_and_nothing_runs(api_client, workload):
    body = make_jobset("bad", workload)
    body["spec"]["replicatedJobs"][0]["replicas"] = "two"
    with pytest.raises(ApiException) as err:
        _objects(api_client).create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)
    status = _status(err.value)
    assert (err.value.status, status["reason"]) == (422, "Invalid")
    assert status["message"].startswith('JobSet.jobset.x-k8s.io "bad" is invalid: ')
    assert {"field": "spec.replicatedJobs[0].replicas", "reason": "FieldValueInvalid"}.items() <= \
        status["details"]["causes"][0].items()
    with pytest.raises(ApiException) as missing:
        _objects(api_client).get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "bad")
    assert (missing.value.status, _status(missing.value)["reason"]) == (404, "NotFound")


def test_duplicate_jobset_is_409_already_exists(api_client, workload):
    body = make_jobset("dup", workload, args=["steps=2"])
    _objects(api_client).create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)
    with pytest.raises(ApiException) as err:
        _objects(api_client).create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)
    assert (err.value.status, _status(err.value)["reason"]) == (409, "AlreadyExists")


def test_a_missing_namespace_is_404(api_client, workload):
    with pytest.raises(ApiException) as err:
        _objects(api_client).create_namespaced_custom_object(GROUP, VERSION, "nowhere", PLURAL,
                                                             make_jobset("x", workload))
    assert (err.value.status, _status(err.value)["message"]) == (404, 'namespaces "nowhere" not found')


def test_foreground_delete_keeps_the_jobset_readable_while_its_pods_terminate(api_client, workload):
    _objects(api_client).create_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, make_jobset("fg", workload, args=["steps=1000", "sleep=0.2", "term=ignore"],
                                                grace=2))
    # The waits are liveness bounds for a loaded machine (pods are processes); what is asserted is the order.
    wait_for(lambda: all(p.status.phase == "Running" for p in _pods(api_client, "fg")) and _pods(api_client, "fg"),
             timeout=90)
    _objects(api_client).delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "fg",
                                                         propagation_policy="Foreground")
    going = _objects(api_client).get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "fg")
    assert going["metadata"]["deletionTimestamp"] and "foregroundDeletion" in going["metadata"]["finalizers"]
    assert all(p.metadata.deletion_timestamp for p in _pods(api_client, "fg"))
    seen: list[tuple[bool, int]] = []

    def gone() -> bool:
        # the JobSet first, then its pods: once the JobSet is gone, no pod may still be listed (pods never return)
        seen.append((not _gone(api_client, "fg"), len(_pods(api_client, "fg"))))
        return not seen[-1][0]

    wait_for(gone, timeout=90)  # the pods ignore SIGTERM: SIGKILL after their 2 s grace, then the JobSet goes
    assert all(readable for readable, pods in seen if pods), seen  # readable while any pod was still there
    assert not _pods(api_client, "fg")


def _gone(api_client, name: str) -> bool:
    try:
        _objects(api_client).get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
    except ApiException as err:
        return err.status == 404
    return False


def test_background_delete_removes_the_jobset_at_once_and_its_pods_after(api_client, workload):
    _objects(api_client).create_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, make_jobset("bg", workload, args=["steps=1000", "sleep=0.2", "term=ignore"],
                                                grace=2))
    wait_for(lambda: _pods(api_client, "bg"))
    _objects(api_client).delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "bg",
                                                         propagation_policy="Background")
    assert _gone(api_client, "bg")
    assert all(p.metadata.deletion_timestamp for p in _pods(api_client, "bg"))
    wait_for(lambda: not _pods(api_client, "bg"), timeout=15)


def test_watch_from_a_version_sees_the_jobset_finish_and_is_410_after_a_restart(home, api_client, workload):
    created = _objects(api_client).create_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, make_jobset("w", workload, args=["steps=3"]))
    seen = []
    for event in watch.Watch().stream(_objects(api_client).list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL,
                                      field_selector="metadata.name=w",
                                      resource_version=created["metadata"]["resourceVersion"], timeout_seconds=20):
        seen.append(event["type"])
        if event["object"].get("status", {}).get("terminalState"):
            break
    assert seen and set(seen) == {"MODIFIED"}
    # A restarted server keeps the objects but not the history: watching from before the restart is 410 Expired.
    stop(home)
    with config.new_client_from_config(config_file=str(ensure_running(home))) as again:
        assert _objects(again).get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "w")["status"]["terminalState"]
        with pytest.raises(ApiException) as err:
            for _ in watch.Watch().stream(_objects(again).list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL,
                                          resource_version=created["metadata"]["resourceVersion"], timeout_seconds=5):
                pass
    assert err.value.status == 410 and "too old resource version" in err.value.reason


def test_configmap_run_lock_create_if_absent_and_compare_and_set(api_client):
    core = k8s.CoreV1Api(api_client)
    body = {"metadata": {"name": "mtc-run-x"}, "data": {"holder": "a"}}
    first = core.create_namespaced_config_map(NS, body)
    with pytest.raises(ApiException) as exists:
        core.create_namespaced_config_map(NS, body)
    assert (exists.value.status, _status(exists.value)["reason"]) == (409, "AlreadyExists")
    first.data = {"holder": "b"}
    core.replace_namespaced_config_map("mtc-run-x", NS, first)
    first.data = {"holder": "c"}  # still the old resourceVersion
    with pytest.raises(ApiException) as conflict:
        core.replace_namespaced_config_map("mtc-run-x", NS, first)
    assert (conflict.value.status, _status(conflict.value)["reason"]) == (409, "Conflict")
    assert core.read_namespaced_config_map("mtc-run-x", NS).data == {"holder": "b"}


def test_checkpoint_configuration_is_cluster_scoped_and_validated(api_client):
    objects = _objects(api_client)
    body = {"apiVersion": "checkpointing.gke.io/v1", "kind": "CheckpointConfiguration",
            "metadata": {"name": "mtc"}, "spec": {"cloudStorageBucketName": "b", "nodeSelector": {"a": "b"},
                                                  "inMemoryVolumeSize": "1Gi"}}
    objects.create_cluster_custom_object("checkpointing.gke.io", "v1", "checkpointconfigurations", body)
    got = objects.get_cluster_custom_object("checkpointing.gke.io", "v1", "checkpointconfigurations", "mtc")
    assert "namespace" not in got["metadata"] and got["spec"]["cloudStorageBucketName"] == "b"
    bad = {**body, "metadata": {"name": "bad"}, "spec": {"cloudStorageBucketName": 7}}
    with pytest.raises(ApiException) as err:
        objects.create_cluster_custom_object("checkpointing.gke.io", "v1", "checkpointconfigurations", bad)
    assert (err.value.status, _status(err.value)["reason"]) == (422, "Invalid")


def test_kubectl_lists_logs_and_deletes_jobsets(kubeconfig, workload):
    jobset = make_jobset("kc", workload, args=["steps=1000", "sleep=0.1"])
    assert "jobset.jobset.x-k8s.io/kc created" in kubectl(kubeconfig, "create", "-f", "-", stdin=json.dumps(jobset))
    wait_for(lambda: kubectl(kubeconfig, "get", "pods").count("Running") == 2)
    listing = kubectl(kubeconfig, "get", "jobsets,pods")
    assert "jobset.jobset.x-k8s.io/kc" in listing and "pod/kc-slice-0-0-" in listing
    pod = kubectl(kubeconfig, "get", "pods", "-l", "jobset.sigs.k8s.io/job-index=0", "-o", "name").strip()
    wait_for(lambda: "completed step" in kubectl(kubeconfig, "logs", pod, "--tail=1"))
    assert 'jobset.jobset.x-k8s.io "kc" deleted' in kubectl(kubeconfig, "delete", "jobset", "kc")
    assert "No resources found" in subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), "get", "jobsets"],
                                                  capture_output=True, text=True).stderr


def test_rendered_jobset_applied_with_kubectl_runs(kubeconfig, tmp_path):
    run = {"target": "local",
           "slices": {"tpu_type": "v6e", "topology": "2x2", "num_slices": 2, "machine_type": "ct6e-standard-4t"},
           "sizing": {"parameters": 1e6},
           "checkpointing": {"run_name": "applied", "base_output_directory": str(tmp_path / "bucket"), "steps": 4,
                             "enable_emergency_checkpoint": True, "local_checkpoint_directory": "/local",
                             "local_checkpoint_period": 1, "checkpoint_period": 2},
           "workload": {"jobset_name": "applied", "image": "local", "max_restarts": 1,
                        "command": ["python", "-m", "mtc_local.light_workload"]}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(run))
    rendered = subprocess.run([sys.executable, "-m", "mtc_provider.cli", "render", str(tmp_path / "run.yaml")], capture_output=True, text=True,
                              check=True).stdout
    assert "jobset.jobset.x-k8s.io/applied created" in kubectl(kubeconfig, "apply", "-f", "-", stdin=rendered)
    wait_for(lambda: "Completed" in kubectl(kubeconfig, "get", "jobset", "applied"), timeout=60, interval=0.5)
