"""A GCS 403 as google-cloud-storage really raises it (`google.api_core.exceptions.Forbidden`, or the storage
library's own `InvalidResponse` for media) becomes the provider's typed PermissionDenied, and the launch's
StorageForbidden: no retry is spent on it, at submission, at a listing, or at the end of an attempt.

The real storage client (the google provider's GCSHook through adapters.gcs_hook.EndpointGCSHook) talks to the GCS
double (tests/doubles/gcs.py) over HTTP; the double answers 403 with Google's error body, as GCS does when the
identity lacks `storage.objects.list` ("<identity> does not have storage.objects.list access to the Google Cloud
Storage bucket.", https://cloud.google.com/storage/docs/troubleshooting#http-403).
"""

from __future__ import annotations

import pytest

from mtc_provider.adapters import retry
from mtc_provider.adapters.checkpoint_stores import GcsCheckpointStore
from mtc_provider.adapters.gcs_hook import EndpointGCSHook
from mtc_provider.operators.jobset import JOBSET_KEPT_XCOM_KEY, StorageForbidden
from tests.doubles.gcs import GcsDouble
from tests.doubles.memory_jobset import status_completed, status_running
from tests.support.jobset_fixtures import cluster  # noqa: F401 - the in-memory cluster
from tests.support.js_helpers import FakeTI, launch, run_try

BUCKET = "ckpt"
RUN_DIR = f"gs://{BUCKET}/out/llama/checkpoints"
DENIED = ("airflow@my-project.iam.gserviceaccount.com does not have storage.objects.list access to the Google "
          "Cloud Storage bucket. Permission 'storage.objects.list' denied on resource (or it may not exist).")
LIST = f"/storage/v1/b/{BUCKET}/o"


@pytest.fixture
def gcs():
    server = GcsDouble().start()
    server.seed(BUCKET, ["out/llama/checkpoints/20/commit_success.txt"])
    yield server
    server.stop()


def _store(gcs: GcsDouble) -> GcsCheckpointStore:
    return GcsCheckpointStore(hook=EndpointGCSHook(gcs.url))


@pytest.mark.parametrize("read", [
    lambda s: s.finalized(RUN_DIR),
    lambda s: s.finalized(RUN_DIR, after=20),
    lambda s: s.item_path(f"{RUN_DIR}/20"),
    lambda s: s.newest_backup(f"gs://{BUCKET}/backup", 2),
], ids=["listing", "incremental-listing", "item-listing", "backup-listing"])
def test_a_real_403_at_a_listing_is_permission_denied_naming_the_permission(gcs, read):
    gcs.fail("GET", LIST, 403, times=5, message=DENIED)
    with pytest.raises(retry.PermissionDenied) as denied:
        retry.through_listing_outage(lambda: read(_store(gcs)), RUN_DIR, budget=30)
    assert denied.value.status == 403 and denied.value.permission == "storage.objects.list"
    assert "does not have storage.objects.list access" in str(denied.value)
    assert gcs.count("GET", LIST) == 1  # surfaced at once: no outage wait, no retry


def test_the_triggers_listing_error_says_http_403(gcs):
    from mtc_provider.core.measure.listing import describe_listing_error

    gcs.fail("GET", LIST, 403, message=DENIED)
    with pytest.raises(retry.PermissionDenied) as denied:
        _store(gcs).finalized(RUN_DIR)
    # the worker reads "HTTP 403" in the trigger's listing-failed event as the storage's 403 (operators.jobset_end)
    assert describe_listing_error(denied.value).startswith("HTTP 403 "), describe_listing_error(denied.value)


def test_the_storage_librarys_own_invalid_response_maps_by_its_status():
    import requests

    try:
        from google.cloud.storage.exceptions import InvalidResponse  # google-cloud-storage 3
    except ImportError:  # 2.x (the lowest version allowed) raises google-resumable-media's own
        from google.resumable_media import InvalidResponse

    response = requests.Response()
    response.status_code = 403
    mapped = retry.map_error(InvalidResponse(response, "Request failed with status code", 403), "storage.objects.get")
    assert isinstance(mapped, retry.PermissionDenied) and mapped.permission == "storage.objects.get"


@pytest.mark.parametrize("good_listings", [0, 1], ids=["at-submission", "at-the-attempts-end"])
def test_a_real_403_fails_the_try_for_good_and_keeps_everything(cluster, gcs, tmp_path, good_listings):  # noqa: F811
    gcs.fail("GET", LIST, 403, times=1, message=DENIED)
    if good_listings:
        gcs.faults[-1].times = 0
        cluster.plan([status_running(), status_completed()])  # ends below its target: its end lists
    store = _store(gcs)

    class DeniedAfter(GcsCheckpointStore):
        """The real store; the 403 is armed after `good_listings` listings (the double answers it)."""

        calls = 0

        def finalized(self, checkpoint_dir, after=None):
            DeniedAfter.calls += 1
            if DeniedAfter.calls > good_listings:
                gcs.faults[-1].times = 1
            return store.finalized(checkpoint_dir, after)

    ti = FakeTI()
    op = launch(str(tmp_path), checkpointing={"run_name": "llama", "base_output_directory": f"gs://{BUCKET}/out",
                                              "steps": 100, "checkpoint_period": 20},
                checkpoint_store_factory=lambda d, c: DeniedAfter(hook=store.hook))
    with pytest.raises(StorageForbidden) as failed:
        run_try(op, ti)
    text = str(failed.value)
    assert f"may not read the run's checkpoints in bucket {BUCKET}" in text and "storage.objects.list" in text, text
    assert "does not have storage.objects.list access" in text  # the storage's own sentence
    assert cluster.deleted == [] and cluster.locks  # nothing deleted, the run lock kept
    assert ti.xcoms[JOBSET_KEPT_XCOM_KEY]["reason"] == text
