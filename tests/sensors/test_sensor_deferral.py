"""The deferrable path of CheckpointProgressSensor: what it hands the trigger, and what it makes of events."""

from __future__ import annotations

import pytest

from mtc_provider.core.basics.errors import CheckpointStalled
from mtc_provider.core.measure.progress import Progress
from mtc_provider.sensors.checkpoint import CheckpointProgressSensor
from mtc_provider.triggers.checkpoint import CheckpointProgressEvent, CheckpointProgressTrigger


def sensor(**kwargs) -> CheckpointProgressSensor:
    values = {"task_id": "s", "checkpoint_dir": "gs://b/run/checkpoints", "target_step": "500",
              "stall_timeout": "600", "poll_interval": 30, "deferrable": True, "gcp_conn_id": "c"}
    return CheckpointProgressSensor(**{**values, **kwargs})


def test_defers_with_rendered_values():
    from airflow.sdk.exceptions import TaskDeferred

    with pytest.raises(TaskDeferred) as info:
        sensor().execute({})
    trigger = info.value.trigger
    assert isinstance(trigger, CheckpointProgressTrigger)
    _, kwargs = trigger.serialize()
    assert kwargs["target_step"] == 500 and kwargs["stall_timeout"] == 600.0 and kwargs["poll_interval"] == 30
    assert kwargs["checkpoint_dir"] == "gs://b/run/checkpoints" and kwargs["gcp_conn_id"] == "c"
    assert kwargs["started_at"] > 0


def event(status: str) -> dict:
    return CheckpointProgressEvent(status, "gs://b/run/checkpoints", 500, Progress(400, 99.0, 120.0, 700.0),
                                   "m", [(300, 50.0), (400, 99.0)], 700.0).to_payload()


def test_reached_event_becomes_xcom():
    s = sensor()
    s.target_step = 500
    assert s.execute_complete({}, {**event("reached"), "progress": Progress(500, 99.0, 120.0, 1.0).to_payload()}) == {
        "latest_step": 500, "commit_time": 99.0, "steps_per_hour": 120.0, "seconds_since_checkpoint": 1.0,
        "target_step": 500, "checkpoint_dir": "gs://b/run/checkpoints",
        "source": None}  # the event names no source


def test_stalled_event_fails_with_reason():
    with pytest.raises(CheckpointStalled, match="for 700s.*stall_timeout 600s.*latest finalized step: 400") as info:
        sensor().execute_complete({}, event("stalled"))
    assert info.value.latest_step == 400
