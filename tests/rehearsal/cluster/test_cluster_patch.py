"""PATCH on the local cluster, driven by the machine's kubectl and the real kubernetes client, with real pods.

As a Kubernetes API server answers it (https://kubernetes.io/docs/reference/using-api/api-concepts/#patch-and-apply):
- `kubectl apply` of a custom resource sends a JSON merge patch (strategic merge patch is "not supported for
  custom resources", https://kubernetes.io/docs/reference/kubectl/generated/kubectl_patch/), `kubectl label` and
  `kubectl annotate` a merge patch too; a ConfigMap takes all three patch types;
- a patch is validated like a create (422), a stale metadata.resourceVersion in it is 409 Conflict, and a change
  gets a new resourceVersion and a MODIFIED watch event;
- JobSet refuses most spec changes: its CRD's transition rules (422) and its webhook (403), see
  mtc_local/cluster/updates.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import watch
from kubernetes.client.rest import ApiException

from tests.support.local_cluster import make_jobset, wait_for
from tests.rehearsal.cluster.test_cluster_apiserver import (
    GROUP, KUBECTL, NS, PLURAL, VERSION, _objects, _status, kubectl,
)


def kubectl_fails(kubeconfig, *args: str) -> str:
    """kubectl's error output for a command the server refuses."""
    done = subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0, done.stdout
    return done.stderr


def _rendered(tmp_path) -> str:
    """The provider's rendered JobSet for a light workload that keeps running (1000 steps of 50 ms)."""
    run = {"target": "local",
           "slices": {"tpu_type": "v6e", "topology": "2x2", "num_slices": 2, "machine_type": "ct6e-standard-4t"},
           "sizing": {"parameters": 1e6},
           "checkpointing": {"run_name": "applied", "base_output_directory": str(tmp_path / "bucket"),
                             "steps": 1000, "checkpoint_period": 500},
           "workload": {"jobset_name": "applied", "image": "local", "max_restarts": 1,
                        "command": ["python", "-m", "mtc_local.light_workload"],
                        "extra_flags": {"step_time_ms": 50}}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(run))
    return subprocess.run([sys.executable, "-m", "mtc_provider.cli", "render", str(tmp_path / "run.yaml")],
                          capture_output=True, text=True, check=True).stdout


def _jobset(api_client, name: str) -> dict:
    return _objects(api_client).get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)


def test_rendered_jobset_applied_again_is_unchanged_then_configured_and_keeps_its_labels(kubeconfig, api_client,
                                                                                        tmp_path):
    rendered = _rendered(tmp_path)
    assert "jobset.jobset.x-k8s.io/applied created" in kubectl(kubeconfig, "apply", "-f", "-", stdin=rendered)
    assert "jobset.jobset.x-k8s.io/applied unchanged" in kubectl(kubeconfig, "apply", "-f", "-", stdin=rendered)
    manifest = yaml.safe_load(rendered)
    manifest["metadata"]["labels"]["team"] = "checkpointing"
    before = _jobset(api_client, "applied")["metadata"]["resourceVersion"]
    assert "jobset.jobset.x-k8s.io/applied configured" in kubectl(kubeconfig, "apply", "-f", "-",
                                                                  stdin=yaml.safe_dump(manifest))
    after = _jobset(api_client, "applied")
    assert after["metadata"]["labels"]["team"] == "checkpointing"
    assert int(after["metadata"]["resourceVersion"]) > int(before)
    assert "jobset.jobset.x-k8s.io/applied unchanged" in kubectl(kubeconfig, "apply", "-f", "-",
                                                                 stdin=yaml.safe_dump(manifest))


def test_kubectl_label_and_annotate_a_running_jobset_are_watched_as_modified(kubeconfig, api_client, workload):
    """Process 0 fails (retryably) at step 10, about 1 s in: the restart is a controller write after the labels."""
    created = _objects(api_client).create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, make_jobset(
        "lbl", workload, args=["steps=1000", "sleep=0.1", "fail_at=10", "fail_pid=0", "fail_once=1"]))
    assert "jobset.jobset.x-k8s.io/lbl labeled" in kubectl(kubeconfig, "label", "jobset", "lbl", "owner=ml")
    assert "jobset.jobset.x-k8s.io/lbl annotated" in kubectl(kubeconfig, "annotate", "jobset", "lbl", "note=hi")
    events = [e for e in watch.Watch().stream(
        _objects(api_client).list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL,
        field_selector="metadata.name=lbl",
        resource_version=created["metadata"]["resourceVersion"], timeout_seconds=1)]
    labelled = [e for e in events if (e["object"]["metadata"].get("labels") or {}).get("owner") == "ml"]
    assert labelled and labelled[0]["type"] == "MODIFIED"
    assert any((e["object"]["metadata"].get("annotations") or {}).get("note") == "hi" for e in events)
    current = wait_for(lambda: (o := _jobset(api_client, "lbl"))["status"]["restarts"] == 1 and o)
    assert current["metadata"]["labels"]["owner"] == "ml" and current["metadata"]["annotations"]["note"] == "hi"
    assert current["metadata"]["generation"] == 1  # metadata only: the spec's generation stays
    kubectl(kubeconfig, "label", "jobset", "lbl", "owner-")
    assert "owner" not in _jobset(api_client, "lbl")["metadata"]["labels"]


def test_immutable_jobset_fields_are_refused_as_jobset_refuses_them(kubeconfig, api_client, workload):
    _objects(api_client).create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL,
                                                         make_jobset("imm", workload, args=["steps=1000"]))
    version = _jobset(api_client, "imm")["metadata"]["resourceVersion"]
    # The CRD's transition rule on spec.failurePolicy: 422 Invalid naming the field.
    refused = kubectl_fails(kubeconfig, "patch", "jobset", "imm", "--type=merge",
                            "-p", '{"spec":{"failurePolicy":{"maxRestarts":9}}}')
    assert 'spec.failurePolicy: Invalid value: "object": Value is immutable' in refused, refused
    with pytest.raises(ApiException) as err:
        _objects(api_client).patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "imm",
                                                            {"spec": {"failurePolicy": {"maxRestarts": 9}}})
    assert (err.value.status, _status(err.value)["details"]["causes"][0]["field"]) == (422, "spec.failurePolicy")
    # JobSet's webhook on spec.replicatedJobs: 403 Forbidden.
    denied = kubectl_fails(kubeconfig, "patch", "jobset", "imm", "--type=json",
                           "-p", '[{"op":"replace","path":"/spec/replicatedJobs/0/replicas","value":3}]')
    assert 'Error from server (Forbidden): admission webhook "vjobset.kb.io" denied the request: ' \
           "spec.replicatedJobs: Invalid value:" in denied, denied
    # What this controller cannot do: suspend.
    suspended = kubectl_fails(kubeconfig, "patch", "jobset", "imm", "--type=merge", "-p", '{"spec":{"suspend":true}}')
    assert "spec.suspend: Forbidden: the local cluster's JobSet controller does not suspend" in suspended, suspended
    # A field of the wrong type: the CRD schema, 422.
    wrong = kubectl_fails(kubeconfig, "patch", "jobset", "imm", "--type=merge",
                          "-p", '{"spec":{"ttlSecondsAfterFinished":"soon"}}')
    assert "spec.ttlSecondsAfterFinished: Invalid value: " in wrong, wrong
    current = _jobset(api_client, "imm")
    assert current["spec"]["failurePolicy"]["maxRestarts"] == 3
    assert current["spec"]["replicatedJobs"][0]["replicas"] == 2
    # A mutable spec field changes, with a new generation.
    kubectl(kubeconfig, "patch", "jobset", "imm", "--type=merge", "-p", '{"spec":{"ttlSecondsAfterFinished":600}}')
    changed = _jobset(api_client, "imm")
    assert changed["spec"]["ttlSecondsAfterFinished"] == 600 and changed["metadata"]["generation"] == 2
    assert int(changed["metadata"]["resourceVersion"]) > int(version)


def test_patch_content_types_preconditions_and_the_status_subresource(kubeconfig, api_client, workload):
    objects = _objects(api_client)
    created = objects.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL,
                                                      make_jobset("pre", workload, args=["steps=2"]))
    wait_for(lambda: _jobset(api_client, "pre")["status"].get("terminalState"))
    # kubectl patch sends a strategic merge patch unless told otherwise: a custom resource answers 415.
    refused = kubectl_fails(kubeconfig, "patch", "jobset", "pre", "-p", '{"metadata":{"labels":{"a":"b"}}}')
    assert ("the body of the request was in an unknown format - accepted media types include: "
            "application/json-patch+json, application/merge-patch+json") in refused, refused
    # Server-side apply: 415 saying so.
    api = objects.api_client
    with pytest.raises(ApiException) as apply:
        api.call_api(f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{PLURAL}/pre", "PATCH",
                     header_params={"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"},
                     body={"metadata": {"labels": {"a": "b"}}}, auth_settings=["BearerToken"], _preload_content=False)
    assert apply.value.status == 415 and "server-side apply" in _status(apply.value)["message"]
    # A stale resourceVersion in the patch: 409 Conflict, nothing written.
    with pytest.raises(ApiException) as stale:
        objects.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "pre", {"metadata": {
            "resourceVersion": created["metadata"]["resourceVersion"], "labels": {"a": "b"}}})
    assert (stale.value.status, _status(stale.value)["reason"]) == (409, "Conflict")
    current = _jobset(api_client, "pre")
    assert "a" not in current["metadata"]["labels"]
    # The current one: applied; a JSON patch whose test fails: 422.
    objects.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "pre", {"metadata": {
        "resourceVersion": current["metadata"]["resourceVersion"], "labels": {"a": "b"}}})
    assert _jobset(api_client, "pre")["metadata"]["labels"]["a"] == "b"
    with pytest.raises(ApiException) as failed_test:  # call_api: the clients' patch methods differ in content-type
        api.call_api(f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{PLURAL}/pre", "PATCH",
                     header_params={"Content-Type": "application/json-patch+json", "Accept": "application/json"},
                     body=[{"op": "test", "path": "/metadata/labels/a", "value": "c"},
                           {"op": "replace", "path": "/metadata/labels/a", "value": "d"}],
                     auth_settings=["BearerToken"], _preload_content=False)
    assert failed_test.value.status == 422
    assert "testing value /metadata/labels/a failed" in _status(failed_test.value)["message"]
    # Status through the main resource is ignored (no write); through the status subresource it changes.
    version = _jobset(api_client, "pre")["metadata"]["resourceVersion"]
    objects.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "pre", {"status": {"terminalState": "Failed"}})
    assert _jobset(api_client, "pre")["metadata"]["resourceVersion"] == version
    condition = {"type": "Reviewed", "status": "True", "reason": "ByHand", "message": "looked at it",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}
    conditions = [*_jobset(api_client, "pre")["status"]["conditions"], condition]
    objects.patch_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, "pre", {"status": {
        "conditions": conditions}})
    got = _jobset(api_client, "pre")
    assert got["status"]["conditions"][-1]["type"] == "Reviewed" and got["status"]["terminalState"] == "Completed"
    assert got["metadata"]["resourceVersion"] != version


def test_configmaps_take_strategic_merge_and_json_patches_and_apply(kubeconfig, api_client):
    core = k8s.CoreV1Api(api_client)
    created = core.create_namespaced_config_map(NS, {"metadata": {"name": "lock"}, "data": {"holder": "a", "x": "1"}})
    kubectl(kubeconfig, "patch", "configmap", "lock", "-p", '{"data":{"holder":"b"}}')  # strategic, the default
    kubectl(kubeconfig, "patch", "configmap", "lock", "--type=merge", "-p", '{"data":{"x":null}}')
    kubectl(kubeconfig, "patch", "configmap", "lock", "--type=json",
            "-p", '[{"op":"add","path":"/data/y","value":"2"}]')
    assert "configmap/lock labeled" in kubectl(kubeconfig, "label", "configmap", "lock", "run=r1")
    got = core.read_namespaced_config_map("lock", NS)
    assert got.data == {"holder": "b", "y": "2"} and got.metadata.labels == {"run": "r1"}
    events = [(e["type"], e["object"].data) for e in watch.Watch().stream(
        core.list_namespaced_config_map, NS, field_selector="metadata.name=lock",
        resource_version=created.metadata.resource_version, timeout_seconds=1)]
    assert [kind for kind, _ in events] == ["MODIFIED"] * 4 and events[0][1] == {"holder": "b", "x": "1"}
    with pytest.raises(ApiException) as stale:
        core.patch_namespaced_config_map("lock", NS, {"metadata": {
            "resourceVersion": created.metadata.resource_version}, "data": {"holder": "c"}})
    assert (stale.value.status, _status(stale.value)["reason"]) == (409, "Conflict")
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied-cm"}, "data": {"k": "1"}}
    assert "configmap/applied-cm created" in kubectl(kubeconfig, "apply", "-f", "-", stdin=json.dumps(manifest))
    manifest["data"] = {"k": "2"}
    assert "configmap/applied-cm configured" in kubectl(kubeconfig, "apply", "-f", "-", stdin=json.dumps(manifest))
    assert core.read_namespaced_config_map("applied-cm", NS).data == {"k": "2"}


def test_checkpoint_configuration_patch_is_validated_against_its_crd(api_client):
    objects = _objects(api_client)
    args = ("checkpointing.gke.io", "v1", "checkpointconfigurations", "mtc")
    objects.create_cluster_custom_object(*args[:3], {
        "apiVersion": "checkpointing.gke.io/v1", "kind": "CheckpointConfiguration", "metadata": {"name": "mtc"},
        "spec": {"cloudStorageBucketName": "b", "nodeSelector": {"a": "b"}, "inMemoryVolumeSize": "1Gi"}})
    with pytest.raises(ApiException) as err:
        objects.patch_cluster_custom_object(*args, {"spec": {"cloudStorageBucketName": 7}})
    assert (err.value.status, _status(err.value)["details"]["causes"][0]["field"]) == (
        422, "spec.cloudStorageBucketName")
    objects.patch_cluster_custom_object(*args, {"spec": {"inMemoryVolumeSize": "2Gi"}})
    assert objects.get_cluster_custom_object(*args)["spec"]["inMemoryVolumeSize"] == "2Gi"
