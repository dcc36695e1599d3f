"""evaluate_pods over pure pod dicts: what can heal, what cannot, and what a start of the pods is waiting for.

Shapes and strings as Kubernetes reports them:
- container waiting reasons: https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#container-state-waiting
  and https://kubernetes.io/docs/concepts/containers/images/#imagepullbackoff (pulls are retried with back-off);
- a missing Secret/ConfigMap: CreateContainerConfigError with the kubelet's `secret "x" not found` / `configmap "x"
  not found` (kubernetes/kubernetes pkg/kubelet/secret/secret_manager.go and configmap/configmap_manager.go:
  NewNotFound(corev1.Resource("secret"|"configmap"), name); pkg/kubelet/kuberuntime/kuberuntime_container.go);
- the restart attempt: JobSet's `jobset.sigs.k8s.io/restart-attempt` label on every pod
  (https://jobset.sigs.k8s.io/docs/reference/labels-annotations-and-environment-variables/).
"""

from __future__ import annotations

from typing import Any

import pytest

from mtc_provider.core.attempt.status import evaluate_pods


def pod(name: str, phase: str = "Pending", waiting: tuple[str, str] | None = None, attempt: int | None = 0,
        scheduled: bool = True, terminating: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": {}}
    if attempt is not None:
        metadata["labels"]["jobset.sigs.k8s.io/restart-attempt"] = str(attempt)
    if terminating:
        metadata["deletionTimestamp"] = "2026-12-01T08:00:00Z"
    state = {"waiting": {"reason": waiting[0], "message": waiting[1]}} if waiting else \
        ({"running": {}} if phase == "Running" else {})
    return {"metadata": metadata, "status": {
        "phase": phase, "conditions": [{"type": "PodScheduled", "status": "True" if scheduled else "False",
                                        **({} if scheduled else {"reason": "Unschedulable",
                                                                 "message": "0/4 nodes are available"})}],
        "containerStatuses": [{"name": "jax-tpu", "state": state}]}}


@pytest.mark.parametrize("reason, message", [
    ("ErrImagePull", 'failed to pull and unpack image "gcr.io/p/m:1": failed to resolve reference: not found'),
    ("ImagePullBackOff", 'Back-off pulling image "gcr.io/p/m:1"'),
    ("CreateContainerError", "context deadline exceeded"),
    ("CreateContainerConfigError", "failed to prepare subPath for volumeMount \"data\": no such file"),
])
def test_transient_image_pull_and_create_errors_are_healing_not_permanent(reason, message):
    state = evaluate_pods([pod("p0", waiting=(reason, message)), pod("p1", "Running")])
    assert not state.permanent_error and f"{reason}: {message}" in state.healing_error
    assert f"waiting for pod p0 container jax-tpu: {reason}" in state.waiting_line()


@pytest.mark.parametrize("reason, message", [
    ("InvalidImageName", 'Failed to apply default image tag "GCR.io/P": couldn\'t parse image name'),
    ("CreateContainerConfigError", 'secret "hf-token" not found'),
    ("CreateContainerConfigError", 'configmap "run-config" not found'),
    ("CreateContainerConfigError", "couldn't find key token in Secret ml/hf-token"),
])
def test_transient_image_pull_only_what_cannot_heal_is_permanent(reason, message):
    state = evaluate_pods([pod("p0", waiting=(reason, message))])
    assert state.permanent_error == f"pod p0 container jax-tpu: {reason}: {message}"


def test_startup_after_restart_counts_only_the_newest_attempts_pods():
    """After restart 1: the old pods still terminate (one even Running), the new ones are creating: not started,
    and the line names what waits (the containers), not capacity."""
    state = evaluate_pods([pod("old-0", "Running", attempt=0, terminating=True), pod("old-1", "Failed", attempt=0),
                           pod("new-0", waiting=("ContainerCreating", ""), attempt=1),
                           pod("new-1", waiting=("ContainerCreating", ""), attempt=1)])
    assert (state.total, state.scheduled, state.running, state.restart_attempt) == (2, 2, 0, 1)
    line = state.waiting_line()
    assert "capacity" not in line and "2 of 2 pods scheduled, 0 running" in line
    assert "pod new-0 container jax-tpu: ContainerCreating" in line


def test_startup_after_restart_a_terminating_pod_is_not_running():
    """Only the old attempt's pods exist yet, still Running while they terminate: not "all started"."""
    state = evaluate_pods([pod("old-0", "Running", attempt=0, terminating=True), pod("old-1", "Running", attempt=0)])
    assert not state.all_started and "pod old-0 terminating" in state.waiting_line()


def test_startup_waiting_for_capacity_keeps_the_schedulers_message():
    state = evaluate_pods([pod("p0", scheduled=False), pod("p1", "Running")])
    assert state.waiting_line() == "waiting for capacity: 1 of 2 pods scheduled: 0/4 nodes are available"
