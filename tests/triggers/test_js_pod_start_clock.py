"""JobSetTrigger.check_pods over pod lists as the API server returns them, with the trigger's clock stepped by hand:
each start of the pods (the first, and each in-cluster restart, whose pods carry the next
`jobset.sigs.k8s.io/restart-attempt`) gets its own startup_timeout and image_pull_timeout.

Pod shapes: tests/core/test_pods_status.py (kubernetes.io "Pod Lifecycle", "Images": ImagePullBackOff is retried).
"""

from __future__ import annotations

import asyncio

from mtc_provider.core.attempt.launch_options import WatchSettings, WatchTimes
from mtc_provider.core.attempt.jobset_events import STARTUP_TIMEOUT, UNSTARTABLE
from mtc_provider.triggers.jobset import JobSetTrigger
from tests.core.test_pods_status import pod

PULL = ("ErrImagePull", 'failed to pull and unpack image "us-docker.pkg.dev/p/r/m:v1": 503 Service Unavailable')


class Pods:
    """list_pods answers whatever the test set last (the API server's current pods)."""

    def __init__(self) -> None:
        self.items: list[dict] = []

    async def list_pods(self, namespace: str, name: str) -> list[dict]:
        return self.items


def trigger(now: list[float], capacity_log_interval: float = 3600, **times: float | None) -> JobSetTrigger:
    t = JobSetTrigger(connection={"kind": "local", "home": "/nonexistent"}, namespace="ml", name="train",
                      watch=WatchSettings(times=WatchTimes(poll_interval=0, capacity_log_interval=capacity_log_interval,
                                                           **times)))
    t.clock = lambda: now[0]
    t._pods_started = False  # what run() sets for an api that lists pods
    return t


def check(t: JobSetTrigger, api: Pods, at: float, now: list[float]):
    now[0] = at
    return asyncio.run(t.check_pods(api))


def restart(t: JobSetTrigger) -> None:
    t._pods_started = False  # what run() does when status.restarts grows: watch the new pods start


def test_transient_image_pull_after_an_in_cluster_restart_gets_its_own_image_pull_timeout():
    now, api = [0.0], Pods()
    t = trigger(now, image_pull_timeout=60)
    api.items = [pod("a0", "Running", attempt=0), pod("b0", "Running", attempt=0)]
    assert check(t, api, 0, now) is None and t._pods_started is True
    restart(t)
    api.items = [pod("a1", waiting=PULL, attempt=1), pod("b1", "Running", attempt=1)]
    assert check(t, api, 5000, now) is None  # hours after the first start: the new start's clock begins now
    assert check(t, api, 5050, now) is None  # still within image_pull_timeout, logged, waited for
    kind, message = check(t, api, 5061, now)
    assert kind == UNSTARTABLE and "for 61s (image_pull_timeout 60s)" in message and PULL[1] in message


def test_startup_after_restart_the_timeout_counts_from_the_new_start_and_names_what_waits():
    now, api = [0.0], Pods()
    t = trigger(now, startup_timeout=100)
    api.items = [pod("a0", "Running", attempt=0), pod("b0", "Running", attempt=0)]
    assert check(t, api, 0, now) is None
    restart(t)
    api.items = [pod("a1", waiting=("ContainerCreating", ""), attempt=1), pod("b1", "Running", attempt=1)]
    assert check(t, api, 9000, now) is None  # not "did not start within startup_timeout" right after the restart
    kind, message = check(t, api, 9101, now)
    assert kind == STARTUP_TIMEOUT and "(pods of restart attempt 1)" in message
    assert "2 of 2 pods scheduled, 1 running; waiting for pod a1 container jax-tpu: ContainerCreating" in message
    assert "capacity" not in message


def test_startup_after_restart_new_attempt_pods_reset_a_start_that_never_finished():
    """Restart 1 came before every pod ran (one failed at once): the pods of attempt 1 start a new clock."""
    now, api = [0.0], Pods()
    t = trigger(now, startup_timeout=100)
    api.items = [pod("a0", "Failed", attempt=0), pod("b0", scheduled=False, attempt=0)]
    assert check(t, api, 0, now) is None
    api.items = [pod("a1", attempt=1, waiting=("ContainerCreating", "")), pod("b1", scheduled=False, attempt=1)]
    assert check(t, api, 90, now) is None
    assert check(t, api, 150, now) is None  # 60 s into attempt 1's start
    kind, message = check(t, api, 191, now)
    assert kind == STARTUP_TIMEOUT and "waiting for capacity: 1 of 2 pods scheduled" in message


class FlakyPods(Pods):
    """A listing that fails while the control plane is away (a 503 from the API server), then answers again."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False

    async def list_pods(self, namespace: str, name: str) -> list[dict]:
        if self.failing:
            raise ConnectionError("503 Service Unavailable")
        return self.items


def test_a_failed_pod_listing_during_an_outage_does_not_stop_following_the_pods():
    """The pods were once dropped for the rest of the watch after one failed listing, so an image that never pulls
    after the outage went unnoticed: the next listing that answers is read as before."""
    now, api = [0.0], FlakyPods()
    t = trigger(now, image_pull_timeout=60)
    api.failing = True
    assert check(t, api, 0, now) is None and t._pods_started is False
    api.failing = False
    api.items = [pod("a0", waiting=PULL, attempt=0), pod("b0", "Running", attempt=0)]
    assert check(t, api, 10, now) is None
    kind, message = check(t, api, 71, now)
    assert kind == UNSTARTABLE and PULL[1] in message


# An Event as the API server lists it (https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/event-v1/):
# the kubelet's FailedMount when the MTC CSI driver cannot mount the ramdisk.
def failed_mount(pod_name: str, count: int = 3, node: str = "gke-tpu-node-7") -> dict:
    return {"kind": "Event", "involvedObject": {"kind": "Pod", "namespace": "ml", "name": pod_name},
            "reason": "FailedMount", "type": "Warning", "count": count, "lastTimestamp": "2026-12-02T03:00:00Z",
            "message": 'MountVolume.SetUp failed for volume "ramdisk" : rpc error: code = Internal desc = '
                       'no CheckpointConfiguration selects this node',
            "source": {"component": "kubelet", "host": node}}


class PodsAndEvents(Pods):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[dict] = []
        self.event_lists = 0

    async def list_pod_events(self, namespace: str) -> list[dict]:
        self.event_lists += 1
        return self.events


def test_pods_stuck_in_container_creating_are_logged_with_their_mount_events_and_the_timeout_names_them(capsys):
    """Issue 32 (4): before, a scheduled pod stuck in ContainerCreating was neither logged nor explained."""
    now, api = [0.0], PodsAndEvents()
    t = trigger(now, startup_timeout=600, capacity_log_interval=300)
    api.items = [pod("a0", waiting=("ContainerCreating", ""), attempt=0), pod("b0", "Running", attempt=0)]
    api.events = [failed_mount("a0"), failed_mount("someone-elses-pod")]
    assert check(t, api, 0, now) is None
    assert check(t, api, 100, now) is None  # not yet time for another line (nor another events list)
    assert check(t, api, 301, now) is None
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "waiting for the pods to start" in ln]
    assert len(lines) == 2 and api.event_lists == 2, lines
    assert ("pod a0 on node gke-tpu-node-7: FailedMount (x3): MountVolume.SetUp failed for volume \"ramdisk\"" in
            lines[1]) and "someone-elses-pod" not in lines[1] and "ContainerCreating" in lines[1]
    kind, message = check(t, api, 601, now)
    assert kind == STARTUP_TIMEOUT and "waiting for pod a0 container jax-tpu: ContainerCreating" in message
    assert "Kubernetes events: pod a0 on node gke-tpu-node-7: FailedMount (x3)" in message


def test_an_events_list_that_fails_is_logged_once_and_the_startup_clock_still_decides(capsys):
    class Refused(PodsAndEvents):
        async def list_pod_events(self, namespace: str) -> list[dict]:
            raise PermissionError("events is forbidden")

    now, api = [0.0], Refused()
    t = trigger(now, startup_timeout=10, capacity_log_interval=1)
    api.items = [pod("a0", waiting=("ContainerCreating", ""), attempt=0)]
    assert check(t, api, 0, now) is None
    assert check(t, api, 5, now) is None
    assert capsys.readouterr().out.count("could not list the events") == 1
    kind, message = check(t, api, 11, now)
    assert kind == STARTUP_TIMEOUT and "Kubernetes events" not in message


def test_volume_event_lines_keep_the_newest_per_pod_and_bound_the_count():
    from mtc_provider.core.attempt.pod_events import volume_event_lines

    older = {**failed_mount("a0", count=1), "lastTimestamp": "2026-12-02T02:00:00Z", "message": "old"}
    attach = {**failed_mount("b0", node=""), "reason": "FailedAttachVolume", "message": "attach failed"}
    pods = [pod("a0", attempt=0), {**pod("b0", attempt=0), "spec": {"nodeName": "node-b"}}]
    lines = volume_event_lines([older, failed_mount("a0"), attach, {**failed_mount("a0"), "reason": "Pulled"}], pods)
    assert lines[0].startswith("pod a0 on node gke-tpu-node-7: FailedMount (x3): MountVolume.SetUp failed")
    assert lines[1] == "pod b0 on node node-b: FailedAttachVolume (x3): attach failed"
    many = [pod(f"p{i}", attempt=0) for i in range(8)]
    bounded = volume_event_lines([failed_mount(f"p{i}") for i in range(8)], many)
    assert len(bounded) == 6 and bounded[-1] == "... and 3 more pods with volume events"
