"""Real Orbax checkpoints, including a save SIGKILLed mid-way, sensed by the stores and the sensor:
the finalized set must equal Orbax's own read-only listing, on a local directory and on gs:// (emulator)."""

from __future__ import annotations

import pytest
from tests.support.checkpoint_fixtures import GCS_CONN_ID, orbax_steps, run_orbax

from mtc_provider.adapters.checkpoint_stores import GcsCheckpointStore, LocalCheckpointStore, open_store
from mtc_provider.core.basics.errors import CheckpointStalled, SpecError
from mtc_provider.sensors.checkpoint import CheckpointProgressSensor

pytestmark = pytest.mark.timeout(240)


def write_with_killed_save(directory: str) -> None:
    result = run_orbax(directory, "1", "2", "5", "--kill-during-save", "7")
    assert result.returncode == -9, result.stderr[-2000:]  # really killed, mid-save


def test_local_store_matches_orbax_and_ignores_killed_save(tmp_path):
    directory = str(tmp_path / "run" / "checkpoints")
    write_with_killed_save(directory)
    assert (tmp_path / "run" / "checkpoints" / "7.orbax-checkpoint-tmp").is_dir()  # the killed save's leftover
    (tmp_path / "run" / "checkpoints" / "9").mkdir()  # an uncommitted step dir never counts either
    found = LocalCheckpointStore().finalized(directory)
    assert [c.step for c in found] == [1, 2, 5]
    assert [c.step for c in found] == [s for s in orbax_steps(directory) if s != 9]
    assert all(c.commit_time and c.path.endswith(f"/{c.step}") for c in found)
    assert [c.step for c in LocalCheckpointStore().finalized(directory, after=2)] == [5]


def test_gcs_store_matches_orbax_and_ignores_killed_save(gcs):
    directory = "gs://ckpt/runa/checkpoints"
    write_with_killed_save(directory)
    store = GcsCheckpointStore(GCS_CONN_ID)
    found = store.finalized(directory)
    assert [c.step for c in found] == orbax_steps(directory) == [1, 2, 5]
    assert found[-1].path == "gs://ckpt/runa/checkpoints/5" and found[-1].commit_time > 1.7e9
    assert [c.step for c in store.finalized(directory, after=2)] == [5]


def test_sensor_poke_on_gcs_reaches_target_and_reports_progress(gcs):
    directory = "gs://ckpt/runb/checkpoints"
    assert run_orbax(directory, "3", "6").returncode == 0
    sensor = CheckpointProgressSensor(task_id="s", checkpoint_dir=directory, target_step=6, stall_timeout=60,
                                      poll_interval=1, gcp_conn_id=GCS_CONN_ID, deferrable=False)
    sensor._validate()
    result = sensor.poke({})
    assert result.is_done
    assert result.xcom_value["latest_step"] == 6 and result.xcom_value["checkpoint_dir"] == directory
    assert result.xcom_value["seconds_since_checkpoint"] >= 0


def test_sensor_poke_local_not_reached_then_stalled(tmp_path, monkeypatch):
    directory = str(tmp_path / "checkpoints")
    assert run_orbax(directory, "4").returncode == 0
    sensor = CheckpointProgressSensor(task_id="s", checkpoint_dir=directory, target_step=10, stall_timeout=30,
                                      poll_interval=5, deferrable=False)
    sensor._validate()
    clock = iter([1000.0, 1020.0, 1031.0])
    monkeypatch.setattr("mtc_provider.sensors.checkpoint.time.time", lambda: next(clock))
    assert sensor.poke({}) is False  # step 4 seen: progress
    assert sensor.poke({}) is False  # 20 s without a new step: still within the stall timeout
    with pytest.raises(CheckpointStalled, match="stalled.*latest finalized step: 4"):
        sensor.poke({})


@pytest.mark.parametrize("kwargs, field", [
    ({"checkpoint_dir": "relative/dir"}, "checkpoint_dir"),
    ({"checkpoint_dir": "gs://"}, "checkpoint_dir"),
    ({"target_step": "ten"}, "target_step"),
    ({"target_step": 0}, "target_step"),
    ({"stall_timeout": -1}, "stall_timeout"),
])
def test_bad_sensor_input_names_the_field(kwargs, field):
    values = {"checkpoint_dir": "/tmp/x", "target_step": 5, "stall_timeout": 10, **kwargs}
    sensor = CheckpointProgressSensor(task_id="s", poll_interval=1, deferrable=False, **values)
    with pytest.raises(SpecError) as info:
        sensor._validate()
    assert info.value.field == field


def test_open_store_picks_by_scheme(tmp_path):
    assert isinstance(open_store("gs://b/p"), GcsCheckpointStore)
    assert isinstance(open_store(str(tmp_path)), LocalCheckpointStore)
    assert isinstance(open_store(f"file://{tmp_path}"), LocalCheckpointStore)


def step_objects(prefix: str, count: int) -> list[str]:
    """Step dirs as Orbax leaves them on GCS: several files each, the commit marker among them."""
    files = ("_CHECKPOINT_METADATA", "default/manifest.ocdbt", "default/d/0", "commit_success.txt")
    return [f"{prefix}/{step}/{name}" for step in range(1, count + 1) for name in files]


@pytest.mark.parametrize("count", [10, 1000])
def test_sensing_cost_per_poke(gcs, count, record_property):
    """Requests per poke against the emulator; entries returned follow step dirs, not files inside them."""
    prefix = f"cost{count}/checkpoints"
    gcs.seed("ckpt", step_objects(prefix, count) + [f"{prefix}/{count + 1}.orbax-checkpoint-tmp/x"])
    store = GcsCheckpointStore(GCS_CONN_ID)
    directory = f"gs://ckpt/{prefix}"
    gcs.reset()
    first = store.finalized(directory)
    assert len(first) == count
    first_listings, first_entries = len(gcs.listings()), sum(r.entries for r in gcs.listings())
    assert first_listings == 1 and first_entries == count  # one commit marker per step, not 4 files per step
    gcs.reset()
    assert store.finalized(directory, after=count) == []
    later_listings = len(gcs.listings())
    assert later_listings == 2  # startOffset listing + the longer-step-names listing
    record_property("cost", {"dirs": count, "first_poke_requests": first_listings, "first_poke_entries": first_entries,
                             "first_poke_gcs_pages": -(-first_entries // 1000), "later_poke_requests": later_listings})
