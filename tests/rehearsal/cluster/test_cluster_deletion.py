"""Deleting JobSets with propagationPolicy Orphan and deleting pods, on the local cluster with real processes, through
the machine's kubectl and the real kubernetes client; and how kubectl shows pods a start fault holds.

Documented behaviour reproduced:
- https://kubernetes.io/docs/concepts/architecture/garbage-collection/#orphaned-dependents : an Orphan delete removes
  the owner at once and leaves its dependents: a JobSet's Jobs, and so their pods (owned by the Jobs), run on.
- https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination : a deleted pod gets
  deletionTimestamp (kubectl shows Terminating), its container SIGTERM, SIGKILL after the grace period; the
  kubelet then puts it in a terminal phase (Failed for a non-zero exit) and its Job's failure handling applies:
  backoffLimit 0, so the Job fails and the JobSet's failurePolicy restarts it.
- https://kubernetes.io/docs/concepts/containers/images/#imagepullbackoff and
  https://kubernetes.io/docs/concepts/scheduling-eviction/kube-scheduler/ : kubectl's STATUS column shows the
  container's waiting reason (ErrImagePull, then ImagePullBackOff) and Pending for a pod no node can take.
"""

from __future__ import annotations

import json
import re
import subprocess
import time

import psutil
import pytest
from kubernetes.client import CoreV1Api
from kubernetes.client.rest import ApiException

from mtc_local.cluster.pods import FIRST_PULL_SECONDS, _image_pull_waiting
from tests.support.local_cluster import make_jobset, processes_mentioning, wait_for
from tests.rehearsal.cluster.test_cluster_apiserver import (
    GROUP, KUBECTL, NS, PLURAL, VERSION, _gone, _objects, _pods, _status, kubectl,
)


def _running(api_client, name: str, count: int = 2) -> list:
    return wait_for(lambda: (pods := [p for p in _pods(api_client, name) if p.status.phase == "Running"])
                    and len(pods) == count and pods)


def _pod_rows(kubeconfig) -> dict[str, list[str]]:
    """`kubectl get pods` as {name: [READY, STATUS, RESTARTS, AGE]}."""
    lines = kubectl(kubeconfig, "get", "pods").splitlines()
    assert lines[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"], lines[0]
    return {row.split()[0]: row.split()[1:] for row in lines[1:]}


def test_orphan_delete_removes_the_jobset_at_once_and_its_pods_run_on(kubeconfig, api_client, api, workload):
    _objects(api_client).create_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, make_jobset("orph", workload, args=["steps=1000", "sleep=0.1"]))
    pods = _running(api_client, "orph")
    pids = {r["pid"] for r in api.pods(NS, "orph")}
    assert 'jobset.jobset.x-k8s.io "orph" deleted' in kubectl(kubeconfig, "delete", "jobset", "orph",
                                                              "--cascade=orphan")
    assert _gone(api_client, "orph")
    time.sleep(1)  # the controller ticks on: nothing terminates them
    left = _running(api_client, "orph")
    assert {p.metadata.name for p in left} == {p.metadata.name for p in pods}
    assert all(not p.metadata.deletion_timestamp and p.metadata.owner_references[0].kind == "Job" for p in left)
    assert all(psutil.pid_exists(pid) for pid in pids)
    # The orphaned pods' Jobs still exist (same names): a new JobSet of that name is refused while they do.
    with pytest.raises(ApiException) as exists:
        _objects(api_client).create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL,
                                                             make_jobset("orph", workload, args=["steps=2"]))
    assert exists.value.status == 409 and "propagationPolicy Orphan" in _status(exists.value)["message"]
    for pod in left:  # each goes through its own termination (the fake workload exits 0 on SIGTERM)
        assert f'pod "{pod.metadata.name}" deleted' in kubectl(kubeconfig, "delete", "pod", pod.metadata.name)
    assert not _pods(api_client, "orph")
    wait_for(lambda: not processes_mentioning(str(workload)))
    _objects(api_client).create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL,
                                                         make_jobset("orph", workload, args=["steps=2"]))
    wait_for(lambda: _objects(api_client).get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "orph")[
        "status"].get("terminalState") == "Completed")


GRACE_S = 6


def test_deleted_pod_terminates_over_its_grace_period_then_the_jobset_restarts(kubeconfig, api_client, api, workload):
    """The workload ignores SIGTERM: the pod is Terminating for its 6 s grace period, then SIGKILLed (exit 137,
    retryable); its Job (backoffLimit 0) fails and the JobSet's failurePolicy restarts the JobSet. (6 s: two kubectl
    processes read the Terminating pod first, a second or more each on a loaded machine.)"""
    _objects(api_client).create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, make_jobset(
        "pd", workload, args=["steps=1000", "sleep=0.1", "term=ignore"], grace=GRACE_S))
    victim = next(p for p in _running(api_client, "pd") if p.metadata.labels["jobset.sigs.k8s.io/job-index"] == "0")
    name = victim.metadata.name
    pid = next(r["pid"] for r in api.pods(NS, "pd") if r["slice"] == 0)
    # Running means its process started, not that the workload has set SIGTERM aside yet (Python's start-up and
    # its first reads take seconds under load): its first step line says it has.
    wait_for(lambda: "completed step" in CoreV1Api(api_client).read_namespaced_pod_log(name, NS), timeout=60,
             interval=0.2)
    started = time.monotonic()
    assert f'pod "{name}" deleted' in kubectl(kubeconfig, "delete", "pod", name, "--wait=false")
    terminating = next(p for p in _pods(api_client, "pd") if p.metadata.name == name)
    assert terminating.metadata.deletion_timestamp and terminating.metadata.deletion_grace_period_seconds == GRACE_S
    assert _pod_rows(kubeconfig)[name][1] == "Terminating"
    time.sleep(1)
    assert psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE  # SIGTERM ignored
    restarted = wait_for(lambda: (o := _objects(api_client).get_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "pd"))["status"]["restarts"] == 1 and o, timeout=GRACE_S + 15)
    assert time.monotonic() - started >= GRACE_S  # not before the grace period ran out
    assert not restarted["status"].get("terminalState")
    new = _running(api_client, "pd")
    assert name not in {p.metadata.name for p in new}
    assert {p.metadata.labels["jobset.sigs.k8s.io/restart-attempt"] for p in new} == {"1"}


def test_deleted_pod_whose_process_exits_on_sigterm_goes_at_once(kubeconfig, api_client, api, workload):
    """SIGTERM is delivered: the workload prints `preempted` and exits 0 long before the 30 s grace period, so
    `kubectl delete pod` (which waits until the pod is gone) returns at once; a pod that exited 0 has Succeeded,
    so its Job does not fail and the JobSet does not restart."""
    _objects(api_client).create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, make_jobset(
        "term", workload, args=["steps=1000", "sleep=0.1"], grace=30))
    victim = next(p for p in _running(api_client, "term") if p.metadata.labels["jobset.sigs.k8s.io/job-index"] == "0")
    started = time.monotonic()
    kubectl(kubeconfig, "delete", "pod", victim.metadata.name, timeout=20)
    assert time.monotonic() - started < 10
    log = next(r["log"] for r in api.pods(NS, "term") if r["slice"] == 0)
    assert open(log).read().rstrip().endswith("preempted")
    time.sleep(0.5)
    jobset = _objects(api_client).get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "term")
    assert jobset["status"]["restarts"] == 0
    assert [p.metadata.labels["jobset.sigs.k8s.io/job-index"] for p in _pods(api_client, "term")] == ["1"]


def test_a_pod_of_a_finished_jobset_just_goes_and_a_bad_grace_period_is_400(kubeconfig, api_client, workload):
    _objects(api_client).create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL,
                                                         make_jobset("fin", workload, args=["steps=1"]))
    wait_for(lambda: _objects(api_client).get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "fin")[
        "status"].get("terminalState"))
    pod = _pods(api_client, "fin")[0].metadata.name
    bad = subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), "delete", "--raw",
                          f"/api/v1/namespaces/{NS}/pods/{pod}?gracePeriodSeconds=-3"], capture_output=True, text=True)
    assert bad.returncode != 0 and "gracePeriodSeconds" in bad.stderr, bad.stderr
    assert f'pod "{pod}" deleted' in kubectl(kubeconfig, "delete", "pod", pod)  # finished: it just goes
    assert pod not in {p.metadata.name for p in _pods(api_client, "fin")}
    missing = subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), "delete", "pod", pod], capture_output=True,
                             text=True)
    assert f'pods "{pod}" not found' in missing.stderr


def test_kubectl_get_pods_shows_image_pull_errors_and_pending_as_kubectl_prints_them(kubeconfig, api_client,
                                                                                     workload):
    """Then deleting the pod that cannot pull its image fails it (no exit code): its Job (backoffLimit 0) fails, the
    JobSet restarts, and the new attempt runs (a start fault holds one attempt)."""
    plan = [{"kind": "image_pull", "slice": 0}, {"kind": "unschedulable", "slice": 1}]
    kubectl(kubeconfig, "create", "-f", "-", stdin=json.dumps(
        make_jobset("held", workload, args=["steps=1000"], fault_plan=plan)))
    rows = wait_for(lambda: (r := _pod_rows(kubeconfig)) and len(r) == 2 and r)
    by_slice = {re.match(r"held-slice-(\d)-0-", name).group(1): cells for name, cells in rows.items()}
    # The first pull's ErrImagePull lasts FIRST_PULL_SECONDS; a listing that comes later (a loaded machine) already
    # shows the back-off, so the order is checked by waiting for the back-off rather than by a fixed sleep.
    assert by_slice["0"][0] == "0/1" and by_slice["0"][2] == "0"
    assert by_slice["0"][1] in ("ErrImagePull", "ImagePullBackOff"), by_slice
    assert by_slice["1"][:3] == ["0/1", "Pending", "0"]
    later = wait_for(lambda: (r := {re.match(r"held-slice-(\d)-0-", n).group(1): c
                                    for n, c in _pod_rows(kubeconfig).items()}) and r["0"][1] == "ImagePullBackOff"
                     and r)
    assert later["1"][1] == "Pending"
    held = next(n for n in _pod_rows(kubeconfig) if n.startswith("held-slice-0-0-"))
    assert f'pod "{held}" deleted' in kubectl(kubeconfig, "delete", "pod", held)
    wait_for(lambda: _objects(api_client).get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "held")[
        "status"]["restarts"] == 1)
    _running(api_client, "held")


def test_the_first_pull_fails_then_the_kubelet_backs_off():
    """kubernetes.io/docs/concepts/containers/images/#imagepullbackoff: ErrImagePull, then ImagePullBackOff."""
    assert _image_pull_waiting("img", 0.0)["reason"] == "ErrImagePull"
    assert _image_pull_waiting("img", FIRST_PULL_SECONDS - 0.01)["reason"] == "ErrImagePull"
    assert _image_pull_waiting("img", FIRST_PULL_SECONDS)["reason"] == "ImagePullBackOff"
