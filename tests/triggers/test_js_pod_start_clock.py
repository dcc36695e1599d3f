"""JobSetTrigger.check_pods over pod lists as the API server returns them, with the trigger's clock stepped by hand:
each start of the pods (the first, and each in-cluster restart, whose pods carry the next
`jobset.sigs.k8s.io/restart-attempt`) gets its own startup_timeout and image_pull_timeout.

Pod shapes: tests/core/test_pods_status.py (kubernetes.io "Pod Lifecycle", "Images": ImagePullBackOff is retried).
"""

from __future__ import annotations

import asyncio

from mtc_provider.core.jobset_events import STARTUP_TIMEOUT, UNSTARTABLE
from mtc_provider.triggers.jobset import JobSetTrigger
from tests.core.test_pods_status import pod

PULL = ("ErrImagePull", 'failed to pull and unpack image "us-docker.pkg.dev/p/r/m:v1": 503 Service Unavailable')


class Pods:
    """list_pods answers whatever the test set last (the API server's current pods)."""

    def __init__(self) -> None:
        self.items: list[dict] = []

    async def list_pods(self, namespace: str, name: str) -> list[dict]:
        return self.items


def trigger(now: list[float], **kwargs) -> JobSetTrigger:
    t = JobSetTrigger(connection={"kind": "local", "home": "/nonexistent"}, namespace="ml", name="train",
                      poll_interval=0, capacity_log_interval=3600, **kwargs)
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
