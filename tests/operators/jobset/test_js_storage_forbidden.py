"""A GCS 403 for Airflow's own identity is the orchestrator's trouble, handled like the cluster's 403 (issue #33
item 5): the try fails at once for good (no retry spent), says which identity lacks which permission on which
bucket, deletes nothing, keeps the run lock and tells the teardown to keep the JobSet (jobset_kept).

The store answers as GCS does when the identity lacks `storage.objects.list`: HTTP 403 with "<identity> does not
have storage.objects.list access to the Google Cloud Storage bucket." (cloud.google.com/storage/docs/
troubleshooting#http-403), which the provider's error mapping turns into PermissionDenied (adapters/retry.py).
"""

from __future__ import annotations

import pytest

from mtc_provider.adapters.checkpoint_stores import LocalCheckpointStore
from mtc_provider.adapters.retry import PermissionDenied
from mtc_provider.operators.jobset import JOBSET_KEPT_XCOM_KEY, StorageForbidden
from tests.doubles.memory_jobset import status_completed, status_running
from tests.support.js_helpers import FakeTI, launch, run_try

DENIED = ("airflow@my-project.iam.gserviceaccount.com does not have storage.objects.list access to the Google "
          "Cloud Storage bucket. Permission 'storage.objects.list' denied on resource (or it may not exist).")


class DeniedAfter(LocalCheckpointStore):
    """Lists as a directory store for `calls` listings, then answers 403 as GCS does."""

    def __init__(self, calls: int) -> None:
        self.calls = calls

    def finalized(self, checkpoint_dir: str, after: int | None = None):
        self.calls -= 1
        if self.calls < 0:
            raise PermissionDenied(DENIED, "storage.objects.list")
        return super().finalized(checkpoint_dir, after)


@pytest.mark.parametrize("calls", [0, 1], ids=["at-submission", "at-the-attempts-end"])
def test_a_storage_403_keeps_everything_and_names_identity_permission_bucket(cluster, tmp_path, calls, monkeypatch):
    store = DeniedAfter(calls)
    from mtc_provider.triggers.jobset import JobSetTrigger

    async def denied(self, after=None):  # the trigger's listing at the end, with the same identity: no verdict there
        raise PermissionDenied(DENIED, "storage.objects.list")

    monkeypatch.setattr(JobSetTrigger, "newest_checkpoints", denied)
    cluster.plan([status_running(), status_completed()])  # the attempt ends below its target: its end lists
    ti = FakeTI()
    with pytest.raises(StorageForbidden) as failed:
        run_try(launch(str(tmp_path), checkpoint_store_factory=lambda d, c: store), ti)
    text = str(failed.value)
    assert "may not read the run's checkpoints in" in text and "storage.objects.list" in text, text
    assert "does not have storage.objects.list access" in text  # the storage's own sentence
    assert cluster.deleted == [] and cluster.locks  # nothing deleted, the run lock kept
    assert ti.xcoms[JOBSET_KEPT_XCOM_KEY]["reason"] == text  # the teardown keeps the JobSet too
