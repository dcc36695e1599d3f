"""CheckpointProgressSensor in mode="reschedule" (issue 11, defect 8): every poke is a new operator instance
(Airflow re-runs the task; docs: "reschedule" mode releases the worker slot between pokes), so its stall clock
must start at the try's first reschedule date, which Airflow keeps (TaskInstance.get_first_reschedule_date),
and a checkpoint's commit time, not the poke, is when progress happened."""

from __future__ import annotations

import datetime as dt
import os
import time

import pytest

from mtc_provider.core.basics.errors import CheckpointStalled
from mtc_provider.sensors.checkpoint import CheckpointProgressSensor


class _RescheduledTI:
    """What a rescheduled try's task instance answers: the date of its first poke."""

    def __init__(self, first_poke: float | None) -> None:
        self.first_poke = first_poke

    def get_first_reschedule_date(self, context):
        return None if self.first_poke is None else dt.datetime.fromtimestamp(self.first_poke, dt.timezone.utc)


def _commit(root, step: int, age_s: float) -> None:
    path = root / str(step)
    path.mkdir(parents=True, exist_ok=True)
    marker = path / "commit_success.txt"
    marker.write_text("")
    os.utime(marker, (time.time() - age_s, time.time() - age_s))


def _poke(root, first_poke: float | None, mode: str = "reschedule"):
    sensor = CheckpointProgressSensor(task_id="progress", checkpoint_dir=str(root), target_step=100,
                                      stall_timeout=600, mode=mode)  # a new instance per poke, like Airflow
    sensor._validate()
    return sensor.poke({"ti": _RescheduledTI(first_poke)})


def test_reschedule_stall_fires_across_pokes_when_no_checkpoint_is_new(tmp_path):
    _commit(tmp_path, 10, age_s=3600)
    assert _poke(tmp_path, None) is False  # the first poke: nothing to compare with yet
    with pytest.raises(CheckpointStalled):
        _poke(tmp_path, time.time() - 1200)  # 20 minutes of pokes, newest checkpoint an hour old


def test_reschedule_stall_does_not_fire_while_checkpoints_keep_coming(tmp_path):
    _commit(tmp_path, 10, age_s=3600)
    _commit(tmp_path, 20, age_s=60)
    assert _poke(tmp_path, time.time() - 1200) is False


def test_reschedule_stall_gives_a_new_try_its_full_stall_timeout(tmp_path):
    _commit(tmp_path, 10, age_s=3600)
    assert _poke(tmp_path, time.time() - 60) is False  # the try started a minute ago
