"""A start fault at an in-cluster restart (`at_restart`): the restarted pods cannot pull their image for a while.

On GKE a JobSet restart recreates its pods, possibly on a new node that has not pulled the image yet; a registry
hiccup then leaves them Pending with `ErrImagePull` (https://kubernetes.io/docs/concepts/containers/images/
#imagepullbackoff): Pending, never failed, so neither the Job nor the JobSet fails, and once the pull succeeds
the containers start. The fault plan's `at_restart` N holds the pods of the first start at restart N or later,
not those of the creation.
"""

from __future__ import annotations

import pytest

from mtc_provider.core.basics.errors import SpecError
from mtc_local.runner.faults import parse_plan
from tests.support.local_cluster import make_jobset, terminal, wait_for
from tests.rehearsal.cluster.test_cluster_apiserver import _pods

NS = "default"


def _waiting(api_client, name: str, restart: str) -> list[str]:
    reasons = []
    for pod in _pods(api_client, name):
        if pod.metadata.labels.get("jobset.sigs.k8s.io/restart-attempt") != restart:
            continue
        for status in pod.status.container_statuses or []:
            if status.state and status.state.waiting:
                reasons.append(status.state.waiting.reason)
    return reasons


def test_image_pull_at_restart_holds_the_restarted_pods_then_they_run(kubeconfig, api_client, api, workload):
    plan = [{"kind": "sigkill_host", "at_step": 3, "slice": 0, "host": 0},
            {"kind": "image_pull", "slice": 0, "at_restart": 1, "seconds": 3}]
    api.create(NS, make_jobset("pull", workload, args=["steps=12", "sleep=0.15"], fault_plan=plan))
    # The creation's pods run at once (no hold): restart 0 reaches step 3, where its host is killed.
    wait_for(lambda: any(f["kind"] == "sigkill_host" for f in api.faults(NS, "pull")), timeout=30)
    assert _waiting(api_client, "pull", "0") == []
    # Restart 1: slice 0's pod waits for its image (ErrImagePull), slice 1's runs; nothing fails meanwhile.
    assert wait_for(lambda: _waiting(api_client, "pull", "1"), timeout=30) == ["ErrImagePull"]
    assert api.get(NS, "pull")["status"].get("terminalState") is None
    done = terminal(api, NS, "pull", timeout=60)
    assert done["status"]["terminalState"] == "Completed" and done["status"]["restarts"] == 1, done["status"]
    assert [f["kind"] for f in api.faults(NS, "pull")] == ["sigkill_host", "image_pull"]


def test_at_restart_is_only_for_start_faults_and_a_restart_number():
    with pytest.raises(SpecError, match=r"\[0\]\.at_restart.*in-cluster restart number"):
        parse_plan([{"kind": "image_pull", "at_restart": -1}], 2, 1)
    with pytest.raises(SpecError, match=r"\[0\]\.at_restart"):
        parse_plan([{"kind": "sigkill_host", "at_step": 2, "at_restart": 1}], 2, 1)
    with pytest.raises(SpecError, match=r"\[0\]\.at_restart"):
        parse_plan([{"kind": "listing_outage", "seconds": 5, "at_restart": 1}], 2, 1)
    (fault,) = parse_plan([{"kind": "unschedulable", "slice": 1, "at_restart": 2}], 2, 1)
    assert (fault.holds_at(1), fault.holds_at(2), fault.holds_at(3)) == (False, True, True)
