"""A checkpoint-listing outage while the launch operator itself lists: at an attempt's end (is the target step
reached?) and at the resubmission (where does the next attempt resume?). GCS answers an outage with 503 or 429 and
says to retry with exponential backoff (https://cloud.google.com/storage/docs/json_api/v1/status-codes,
https://cloud.google.com/storage/docs/retry-strategy); the soak (tests/deploy/test_soak.py) found each such listing
spending an Airflow retry. Now it is waited out for listing_timeout, as the trigger's listing is."""

from __future__ import annotations

import pytest
from google.api_core.exceptions import Forbidden, ServiceUnavailable

from mtc_provider.adapters.checkpoint_stores import LocalCheckpointStore
from tests.support.js_helpers import FakeTI, launch, reach, run_try
from tests.doubles.memory_jobset import status_completed, status_running


class OutageStore(LocalCheckpointStore):
    """The run's checkpoints, behind a listing that fails the first `failures` calls as GCS does in an outage."""

    def __init__(self, failures: int, error: Exception | None = None) -> None:
        self.failures, self.calls = failures, 0
        self.error = error or ServiceUnavailable("GET .../o?prefix=out/llama/checkpoints/: 503 Service Unavailable")

    def finalized(self, checkpoint_dir: str, after: int | None = None) -> list:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return super().finalized(checkpoint_dir, after)


def test_listing_outage_at_the_attempts_end_is_waited_out_not_a_retry(cluster, tmp_path, fast_retries, capfd):
    store = OutageStore(failures=4)
    cluster.plan([status_running(), reach(tmp_path, 100, status_completed())])
    op = launch(str(tmp_path), checkpoint_store_factory=lambda directory, conn_id: store, listing_timeout=30)
    result = run_try(op, FakeTI(try_number=1))  # no JobSetAttemptFailed: the same try ends the run
    assert result["last_step"] == 100 and store.calls > 4 and len(cluster.created) == 1
    assert "a listing outage is not a failed attempt" in "".join(capfd.readouterr())


def test_listing_outage_longer_than_listing_timeout_still_surfaces(cluster, tmp_path, fast_retries):
    store = OutageStore(failures=10**6)
    cluster.plan([status_running(), reach(tmp_path, 100, status_completed())])
    op = launch(str(tmp_path), checkpoint_store_factory=lambda directory, conn_id: store, listing_timeout=0.3)
    with pytest.raises(Exception, match="503"):
        run_try(op, FakeTI(try_number=1))
    assert store.calls >= 2  # retried within its budget, then bounded


def test_listing_forbidden_is_no_outage_and_is_not_waited_for(cluster, tmp_path, fast_retries):
    store = OutageStore(failures=10**6, error=Forbidden("caller does not have storage.objects.list access"))
    cluster.plan([status_running(), reach(tmp_path, 100, status_completed())])
    op = launch(str(tmp_path), checkpoint_store_factory=lambda directory, conn_id: store, listing_timeout=30)
    with pytest.raises(Exception, match="storage.objects.list"):
        run_try(op, FakeTI(try_number=1))
    assert store.calls == 1
