"""What MtcJobSetSensor makes of the trigger's events that are not an end (sensors/jobset.py)."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowFailException

from mtc_provider.core.attempt.jobset_events import STALLED, UNSTARTABLE, JobSetEvent
from mtc_provider.sensors.jobset import MtcJobSetSensor


@pytest.mark.parametrize("kind, message, said", [
    # The trigger's stall reason starts with its kind (triggers/jobset.py): issue 33 saw "stalled: stalled: ...".
    (STALLED, "stalled: no new finalized checkpoint in gs://b/r/checkpoints for 1800s (stall_timeout 1800s; newest "
              "finalized step 40)", "JobSet ml/train: stalled: no new finalized checkpoint in gs://b/r/checkpoints"),
    (UNSTARTABLE, "pod train-slice-0-0 container jax-tpu: InvalidImageName", "JobSet ml/train: unstartable: pod "),
])
def test_the_event_kind_is_named_once(kind, message, said):
    sensor = MtcJobSetSensor(task_id="watch", name="train", namespace="ml")
    with pytest.raises(AirflowFailException) as caught:
        sensor.execute_complete({}, JobSetEvent(kind, "ml", "train", message=message).to_payload())
    text = str(caught.value)
    assert text.startswith(said) and f"{kind}: {kind}:" not in text, text
