"""Checkpoint sensing on the local target goes through its local GCS (a real server process per home) with the GCS
code path (GcsCheckpointStore, GCSHook), and a listing outage on it is told apart from a stalled run end to end.
Outage statuses as GCS answers them: https://cloud.google.com/storage/docs/json_api/v1/status-codes."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from mtc_provider.adapters.retry import PermissionDenied

from mtc_local.target.gcs import LocalBucketCheckpointStore
from mtc_provider.adapters.checkpoint_stores import LocalCheckpointStore, list_newest, open_store
from mtc_provider.core.basics.errors import CheckpointStalled
from mtc_local import gcs as local_gcs
from mtc_provider.sensors.checkpoint import CheckpointProgressSensor
from mtc_provider.triggers.checkpoint import CheckpointProgressEvent, CheckpointProgressTrigger

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def home(tmp_path):
    yield tmp_path
    local_gcs.stop(tmp_path)


def checkpoints(home: Path) -> Path:
    return home / "buckets" / "mtc-checkpoints" / "run" / "checkpoints"


def commit(directory: Path, step: int, files: tuple[str, ...] = ("default/d/0", "_CHECKPOINT_METADATA")) -> None:
    for name in (*files, "commit_success.txt"):
        (directory / str(step) / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / str(step) / name).write_bytes(b"x")


def test_a_local_bucket_directory_is_listed_through_the_local_gcs_with_the_same_answers(home):
    directory = checkpoints(home)
    for step in (5, 10, 100):
        commit(directory, step)
    (directory / "120.orbax-checkpoint-tmp" / "d").mkdir(parents=True)  # a save in flight never counts
    commit(directory, 110, files=())
    (directory / "110" / "commit_success.txt").unlink()  # uncommitted
    store = open_store(str(directory))
    assert isinstance(store, LocalBucketCheckpointStore)
    ours, local = store.finalized(str(directory)), LocalCheckpointStore().finalized(str(directory))
    assert [(c.step, c.path) for c in ours] == [(c.step, c.path) for c in local] == [
        (5, f"{directory}/5"), (10, f"{directory}/10"), (100, f"{directory}/100")]
    assert [c.commit_time for c in ours] == pytest.approx([c.commit_time for c in local], abs=1e-3)
    assert [c.step for c in store.finalized(str(directory), after=10)] == [100]  # startOffset + longer names
    assert store.item_path(f"{directory}/100") == f"{directory}/100/default"
    assert store.cost.requests >= 3 and local_gcs.endpoint(home)  # real requests to the home's server
    assert isinstance(open_store(str(home / "elsewhere")), LocalCheckpointStore)


def test_the_sensor_fails_a_poke_on_a_listing_outage_not_as_a_stall(home):
    directory = checkpoints(home)
    commit(directory, 1)
    sensor = CheckpointProgressSensor(task_id="s", checkpoint_dir=str(directory), target_step=10, stall_timeout=3600)
    assert sensor.poke({}) is False
    local_gcs.fail_listings(home, 403, 60)
    with pytest.raises(PermissionDenied, match="storage.objects.list"):  # the provider's typed 403
        sensor.poke({})
    local_gcs.clear_faults(home)
    commit(directory, 10)
    assert sensor.poke({}).is_done


async def _first_event(trigger: CheckpointProgressTrigger) -> CheckpointProgressEvent:
    async for event in trigger.run():
        return CheckpointProgressEvent.from_payload(event.payload)
    raise AssertionError("no event")


async def test_an_outage_longer_than_stall_timeout_does_not_stall_the_trigger(home):
    directory = checkpoints(home)
    commit(directory, 1)
    open_store(str(directory)).finalized(str(directory))  # server up, client imported: the first poll is quick

    async def outage_then_progress():
        await asyncio.sleep(1.0)  # the trigger has seen step 1 by now
        local_gcs.fail_listings(home, 503, 4)  # 4 s of failing listings, stall_timeout is 2 s
        await asyncio.sleep(4.5)
        commit(directory, 10)  # 5.5 s after step 1: a stall, had the outage counted

    trigger = CheckpointProgressTrigger(str(directory), target_step=10, stall_timeout=2, poll_interval=0.2,
                                        started_at=time.time(), listing_timeout=60)
    writer = asyncio.create_task(outage_then_progress())
    event = await _first_event(trigger)
    await writer
    assert event.status == "reached" and event.progress.latest_step == 10


async def test_an_outage_that_lasts_ends_the_watch_naming_the_bucket_and_status(home):
    directory = checkpoints(home)
    commit(directory, 1)
    local_gcs.ensure_running(home)
    local_gcs.fail_listings(home, 429, 60)
    trigger = CheckpointProgressTrigger(str(directory), target_step=10, stall_timeout=1, poll_interval=0.2,
                                        started_at=time.time(), listing_timeout=1.5)
    event = await _first_event(trigger)
    assert event.status == "listing_failed"
    assert "HTTP 429" in event.message and str(directory) in event.message and "kept failing" in event.message
    sensor = CheckpointProgressSensor(task_id="s", checkpoint_dir=str(directory), target_step=10)
    with pytest.raises(Exception, match="HTTP 429") as raised:
        sensor.execute_complete({}, event.to_payload())
    assert not isinstance(raised.value, CheckpointStalled)


def test_sensing_before_the_first_write_finds_nothing_and_makes_the_bucket(home):
    directory = checkpoints(home)
    store = open_store(str(directory))
    assert store.finalized(str(directory)) == [] and list_newest(store, str(directory)).restorable() is None
    from mtc_local.target.gcs import local_gcs_hook

    client = local_gcs_hook(str(home)).get_conn()
    made = client.get_bucket("mtc-checkpoints")
    assert made.hierarchical_namespace_enabled and made.iam_configuration.uniform_bucket_level_access_enabled


def test_a_new_process_finds_the_running_local_gcs_from_its_endpoint_file_and_a_stale_file_starts_one(home,
                                                                                                      monkeypatch):
    """A task process's first listing reads `<home>/gcs/server.json` (written by the server once it listens) and
    checks the server holds the home's token, instead of running `python -m mtc_local.gcs up`; a file naming a
    server that is gone still starts a new one."""
    from mtc_local.gcs.lifecycle import ensure_running, write_server_file
    from mtc_local.target import gcs as target_gcs

    running = ensure_running(home, idle_seconds=60)
    monkeypatch.setattr(target_gcs, "_local_endpoints", {})  # what a fresh process knows
    started = []
    run = target_gcs.subprocess.run
    monkeypatch.setattr(target_gcs.subprocess, "run", lambda *a, **k: started.append(a) or run(*a, **k))
    assert target_gcs.local_gcs_endpoint(str(home)) == running and started == []
    local_gcs.stop(home)
    write_server_file(home, running, 1)  # the stopped server's file, left behind
    monkeypatch.setattr(target_gcs, "_local_endpoints", {})
    fresh = target_gcs.local_gcs_endpoint(str(home))
    assert len(started) == 1 and local_gcs.endpoint(home) == fresh
