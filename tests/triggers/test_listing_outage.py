"""GCS listings that fail for minutes while training goes on (issue 11, defect 4), through the real client.

The emulator answers checkpoint listings with the GCS JSON API's own error bodies for a while
(cloud.google.com/storage/docs/json_api/v1/status-codes: 403 forbidden, 429 rateLimitExceeded, 503 backendError;
or hangs past the client's timeout), while the JobSet, in the in-memory cluster, keeps running.
A failed listing is not "no progress": the stall clock only runs on successful listings; a listing that keeps
failing for listing_timeout ends the watch with the bucket and the HTTP status.
"""

from __future__ import annotations

import time

import pytest
from airflow.sdk.exceptions import AirflowFailException

from tests.support.checkpoint_fixtures import GCS_CONN_ID
from mtc_provider.core.attempt.launch_options import WatchSettings, WatchTimes
from mtc_provider import targets
from mtc_provider.adapters import checkpoint_stores
from tests.doubles.memory_jobset import (
    AsyncMemoryJobSetApi,
    MemoryJobSetApi,
    MemoryJobSetCluster,
    status_completed,
    status_running,
)
from mtc_provider.core.attempt.jobset_events import ENDED, LISTING_FAILED, JobSetEvent
from mtc_provider.triggers.jobset import JobSetTrigger

pytestmark = pytest.mark.timeout(120)


def _commit(step: int, run: str) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(project="mtc-test", credentials=AnonymousCredentials())
    client.bucket("ckpt").blob(f"{run}/checkpoints/{step}/commit_success.txt").upload_from_string(b"")


@pytest.fixture
def cluster():
    cluster = MemoryJobSetCluster()
    with targets.registered_jobset_api("local", lambda c: MemoryJobSetApi(cluster), lambda c: AsyncMemoryJobSetApi(cluster)):
        yield cluster


def _slow(status: dict, seconds: float = 0.05, then=None):
    def frame(obj):
        time.sleep(seconds)
        if then:
            then()
        return status
    return frame


async def _watch(cluster, run: str, stall_timeout: float, listing_timeout: float) -> list[JobSetEvent]:
    created = cluster.create("default", {"metadata": {"name": "train"}, "spec": {}})
    times = WatchTimes(poll_interval=0.02, listing_timeout=listing_timeout)
    trigger = JobSetTrigger(connection={"kind": "local", "home": "/nonexistent"}, namespace="default", name="train",
                            resource_version=created["metadata"]["resourceVersion"],
                            checkpoint_dir=f"gs://ckpt/{run}/checkpoints", gcp_conn_id=GCS_CONN_ID,
                            watch=WatchSettings(times=times, stall_timeout=stall_timeout))
    return [JobSetEvent.from_payload(e.payload) async for e in trigger.run()]


class _Clock:
    """The trigger's wall clock, stepped by hand: minutes of outage without waiting minutes."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _trigger_at(run: str, clock: _Clock, stall_timeout: float, listing_timeout: float) -> JobSetTrigger:
    trigger = JobSetTrigger(connection={"kind": "local", "home": "/nonexistent"}, namespace="default", name="train",
                            checkpoint_dir=f"gs://ckpt/{run}/checkpoints", gcp_conn_id=GCS_CONN_ID,
                            watch=WatchSettings(times=WatchTimes(listing_timeout=listing_timeout),
                                                stall_timeout=stall_timeout))
    trigger.clock = clock
    return trigger


RUNNING = __import__("mtc_provider.core.attempt.status", fromlist=["JobSetState"]).JobSetState("train", "default", "running")


@pytest.mark.parametrize("status", [503, 429, "timeout"])
async def test_listing_outage_longer_than_stall_timeout_does_not_stall_a_healthy_run(gcs, monkeypatch, status):
    monkeypatch.setattr(checkpoint_stores, "LISTING_TIMEOUT", 0.3)
    gcs.hang_s = 0.6
    run = f"outage-{status}"
    _commit(10, run)
    clock = _Clock()
    trigger = _trigger_at(run, clock, stall_timeout=600, listing_timeout=1800)
    start = clock.now
    assert await trigger.check_stall(RUNNING) is None  # the clock starts
    clock.now = start + 10
    assert await trigger.check_stall(RUNNING) is None  # step 10 seen
    gcs.fail_listings(status, 60)
    for minute in (5, 10, 12):  # 12 minutes of failing listings: more than stall_timeout (10 minutes)
        clock.now = start + 60 * minute
        assert await trigger.check_stall(RUNNING) is None
    gcs.outage_until = 0
    # Listings answer again; a loaded machine must not turn a slow answer into another timeout.
    monkeypatch.setattr(checkpoint_stores, "LISTING_TIMEOUT", 30.0)
    clock.now = start + 60 * 14  # listing works again: 4 minutes of real "no progress" (10 s + 2 min + 2 min)
    assert await trigger.check_stall(RUNNING) is None and not trigger.listing_error
    clock.now = start + 60 * 23  # 9 more minutes without a new step on successful listings: now it is a stall
    reason = await trigger.check_stall(RUNNING)
    assert reason and "newest finalized step 10" in reason


async def test_listing_outage_that_lasts_sets_a_clear_error_naming_the_bucket_and_status(gcs):
    run = "outage-403-trigger"
    clock = _Clock()
    trigger = _trigger_at(run, clock, stall_timeout=600, listing_timeout=1800)
    start = clock.now
    assert await trigger.check_stall(RUNNING) is None
    gcs.fail_listings(403, 60)
    try:
        for minute in (1, 20, 32):
            clock.now = start + 60 * minute
            assert await trigger.check_stall(RUNNING) is None
    finally:
        gcs.outage_until = 0
    assert "bucket ckpt" in trigger.listing_error and "HTTP 403" in trigger.listing_error
    assert "kept failing for 1860s (listing_timeout 1800s)" in trigger.listing_error


async def test_listing_outage_ends_the_watch_with_a_listing_failed_event(gcs, cluster):
    run = "outage-403"
    _commit(10, run)
    cluster.plan([status_running(), _slow(status_running(), then=lambda: gcs.fail_listings(403, 30))]
                 + [_slow(status_running())] * 200)
    (event,) = await _watch(cluster, run, stall_timeout=5, listing_timeout=0.5)
    assert event.kind == LISTING_FAILED
    assert "bucket ckpt" in event.message and "HTTP 403" in event.message
    gcs.outage_until = 0


def test_listing_outage_403_fails_the_launch_for_good_and_leaves_training_alone(gcs, cluster, tmp_path):
    from tests.support.js_helpers import FakeTI, launch, run_try

    cluster.plan([status_running(), _slow(status_running(), then=lambda: gcs.fail_listings(403, 30))]
                 + [_slow(status_running())] * 200)
    op = launch(str(tmp_path), checkpointing={"run_name": "llama403", "base_output_directory": "gs://ckpt/out",
                                              "steps": 100, "checkpoint_period": 20},
                checkpoint_store_factory=None, gcp_conn_id=GCS_CONN_ID, stall_timeout=5, listing_timeout=0.5,
                poll_interval=0.02)
    try:
        with pytest.raises(AirflowFailException, match=r"bucket ckpt\).*HTTP 403"):
            run_try(op, FakeTI())
    finally:
        gcs.outage_until = 0
    assert cluster.deleted == []  # the run keeps training; fixing the permission and clearing reattaches
