"""OpenLineage facets through the OpenLineage provider's own extractor path (ExtractorManager picks its
DefaultExtractor for an operator that defines get_openlineage_facets_on_complete, as for the google provider's GCS
operators), after a real DAG run (dag.test() on SQLite, the in-memory JobSet api). The full listener path, with
events written by openlineage-python's FileTransport, runs in tests/acceptance/test_acceptance_runs.py.
"""

from __future__ import annotations

import datetime as dt

import pytest

from tests.support.js_helpers import ckpt_dir, reach
from mtc_provider.lineage import dataset_name
from tests.doubles.memory_jobset import status_completed, status_running
from tests.support.jobset_fixtures import load_bundle_dags

pytestmark = pytest.mark.timeout(300)
LOGICAL = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def _names(datasets) -> list[tuple[str, str]]:
    return [(d.namespace, d.name) for d in datasets]


def test_launch_and_progress_report_the_checkpoint_directory(monkeypatch, tmp_path, airflow_db, cluster):
    from airflow.providers.openlineage.extractors.manager import ExtractorManager
    from airflow.utils.state import TaskInstanceState

    from mtc_provider.sensors.checkpoint import CheckpointProgressSensor

    dags = load_bundle_dags(monkeypatch, tmp_path, "mtc_jobset_dags.py")
    cluster.plan([status_running(), reach(tmp_path, 100, status_completed())])
    dag = dags.retry_sync
    dr = dag.test(logical_date=LOGICAL, run_after=LOGICAL)
    assert dr.state == "success"
    ti = dr.get_task_instance("train")
    task = dag.get_task("train")
    lineage = ExtractorManager().extract_metadata(dr, task, TaskInstanceState.SUCCESS, ti)
    expected = [("file", ckpt_dir(tmp_path))]
    assert _names(lineage.inputs) == expected and _names(lineage.outputs) == expected

    sensor = CheckpointProgressSensor(task_id="progress", checkpoint_dir="gs://ckpts/runs/llama/checkpoints",
                                      target_step=100)
    lineage = ExtractorManager().extract_metadata(dr, sensor, TaskInstanceState.SUCCESS, ti)
    assert _names(lineage.inputs) == [("gs://ckpts", "runs/llama/checkpoints")] and lineage.outputs == []


def test_the_bucket_is_named_as_the_google_provider_names_a_bucket_root(airflow_db):
    from airflow.providers.openlineage.extractors.manager import ExtractorManager
    from airflow.utils.state import TaskInstanceState

    from mtc_provider.operators.gcp import MtcCreateBucketOperator

    op = MtcCreateBucketOperator(task_id="bucket", bucket_name="mtc-ckpts", target={"kind": "local", "home": "/x"})
    lineage = ExtractorManager().extract_metadata(type("Run", (), {"run_id": "r"})(), op, TaskInstanceState.SUCCESS,
                                                  None)
    assert _names(lineage.outputs) == [("gs://mtc-ckpts", "/")] and lineage.inputs == []


@pytest.mark.parametrize("location, expected", [
    ("gs://b/runs/llama/checkpoints", ("gs://b", "runs/llama/checkpoints")),
    ("gs://b/runs/llama/checkpoints/", ("gs://b", "runs/llama/checkpoints")),
    ("gs://b", ("gs://b", "/")),
    ("/home/me/buckets/b/llama/checkpoints", ("file", "/home/me/buckets/b/llama/checkpoints")),
    ("file:///tmp/out/llama/checkpoints", ("file", "/tmp/out/llama/checkpoints")),
])
def test_dataset_names_follow_the_openlineage_naming_spec(location, expected):
    assert dataset_name(location) == expected
