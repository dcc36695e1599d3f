"""The goodput report of a multi-tier run on GKE, with the real storage client against the GCS emulator: MaxText
writes no persistent checkpoint in that mode, so the run's restorable progress is the replicator's newest backup
complete on every node (adapters.checkpoint_stores `newest_backup`); a partial one is no progress."""

from __future__ import annotations

import time

from mtc_provider.operators.goodput import GoodputReportOperator
from tests.sensors.test_multi_tier_progress import NODES, SLICES, backup, checkpointing
from tests.support.checkpoint_fixtures import GCS_CONN_ID


def _report(run: str, tmp_path) -> dict:
    start = time.time() - 100
    attempts = [{"start": start, "end": start + 40, "outcome": "disrupted"},
                {"start": start + 50, "end": start + 100, "outcome": "finished"}]
    return GoodputReportOperator(
        task_id="goodput", checkpoint_dir=f"gs://ckpt/out/{run}/checkpoints", attempts=attempts,
        chart_path=str(tmp_path / "goodput.png"), gcp_conn_id=GCS_CONN_ID, checkpointing=checkpointing(run),
        slices=SLICES).execute({"run_id": "manual__1"})


def test_a_complete_backup_is_the_runs_progress_a_partial_one_is_not(gcs, tmp_path):
    backup("gpmt", 40, range(NODES - 1))  # one node has not backed step 40 up
    partial = _report("gpmt", tmp_path)
    assert partial["last_productive_step"] is None and partial["productive_s"] == 0, partial
    backup("gpmt", 40, range(NODES - 1, NODES))
    complete = _report("gpmt", tmp_path)
    assert complete["last_productive_step"] == 40 and complete["productive_s"] > 0, complete
    assert f"replicator backup of step 40 (complete on all {NODES} nodes)" in complete["source"]
