"""The goodput chart on GKE is written next to the checkpoints, in the bucket, and linked (issue 11, defect 10)."""

from __future__ import annotations

import time

from tests.support.checkpoint_fixtures import GCS_CONN_ID
from mtc_provider.links.goodput import GoodputChartLink
from mtc_provider.operators.goodput import GoodputReportOperator

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class _TI:
    def __init__(self) -> None:
        self.xcoms: dict = {}

    def xcom_push(self, key, value) -> None:
        self.xcoms[key] = value

    def xcom_pull(self, task_ids, key):
        return self.xcoms.get((task_ids, key))


def test_attempt_records_chart_lands_next_to_the_gcs_checkpoints_with_a_link(gcs):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    bucket = storage.Client(project="mtc-test", credentials=AnonymousCredentials()).bucket("ckpt")
    start = time.time()
    for step in (20, 40, 60):
        bucket.blob(f"chart-run/checkpoints/{step}/commit_success.txt").upload_from_string(b"")
    end = time.time() + 1
    ti = _TI()
    ti.xcoms[("train", "attempts")] = [  # what the launch operator pushes: one record per attempt
        {"attempt": 1, "start": start - 5, "end": start + 0.01, "outcome": "disrupted", "restarts": 1, "last_step": 20},
        {"attempt": 2, "start": start + 0.5, "end": end, "outcome": "finished", "restarts": 0, "last_step": 60}]
    report = GoodputReportOperator(task_id="goodput", checkpoint_dir="gs://ckpt/chart-run/checkpoints",
                                   attempts_task_id="train", gcp_conn_id=GCS_CONN_ID).execute(
        {"ti": ti, "run_id": "manual__2026-01-01T00:00:00+00:00"})
    assert report["chart_path"] == "gs://ckpt/chart-run/goodput/manual__2026-01-01T00_00_00_00_00.png"
    assert bucket.blob("chart-run/goodput/manual__2026-01-01T00_00_00_00_00.png").download_as_bytes()[:8] == PNG_MAGIC
    assert ti.xcoms[GoodputChartLink.key].startswith("https://console.cloud.google.com/storage/browser/_details/ckpt/")
    assert report["disruptions"] == 1 and report["goodput"] < 1
