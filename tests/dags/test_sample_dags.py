"""The sample DAGs load with no import errors, have the expected graphs, and import nothing heavy at parse time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("jax", "orbax", "kubernetes", "kubernetes_asyncio", "google.cloud.storage", "google.cloud.container_v1",
         "matplotlib", "tensorstore", "numpy")


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO / "dags"))


def test_dags_load_without_import_errors(dagbag):
    assert dagbag.import_errors == {}
    assert {"mtc_resilient_training", "mtc_cluster_setup", "mtc_checkpoint_evaluation"} <= set(dagbag.dag_ids)


def _edges(dag) -> set[tuple[str, str]]:
    return {(up, task.task_id) for task in dag.tasks for up in task.upstream_task_ids}


def test_training_graph(dagbag):
    dag = dagbag.dags.get("mtc_resilient_training")
    assert {("plan", "readiness"), ("readiness", "train"), ("train", "checkpoint_progress"),
            ("checkpoint_progress", "goodput"), ("goodput", "teardown"), ("train", "teardown")} <= _edges(dag)
    train = dag.get_task("train")
    assert train.retries >= 3
    assert dag.get_task("teardown").is_teardown
    assert set(dag.params.keys()) >= {"target", "enable_checkpointing", "enable_emergency_checkpoint",
                                      "async_checkpointing", "local_checkpoint_directory", "local_checkpoint_period",
                                      "checkpoint_period", "enable_single_replica_ckpt_restoring",
                                      "enable_autocheckpoint", "steps", "fault_plan", "num_slices", "topology"}


def test_setup_graph_is_the_guides_order(dagbag):
    dag = dagbag.dags.get("mtc_cluster_setup")
    assert {("enable_mtc", "bucket"), ("bucket", "grant_bucket_access"),
            ("grant_bucket_access", "checkpoint_configuration"), ("node_pools", "ready"),
            ("checkpoint_configuration", "ready")} <= _edges(dag)


def test_evaluation_is_scheduled_on_the_checkpoint_asset_with_a_watcher(dagbag):
    dag = dagbag.dags.get("mtc_checkpoint_evaluation")
    [asset] = dag.timetable.asset_condition.objects
    assert asset.uri.startswith("file:///") and asset.uri.endswith("/mtc-demo/checkpoints")
    assert asset.watchers and asset.watchers[0].trigger.__class__.__name__ == "CheckpointAssetTrigger"


@pytest.mark.parametrize("name", ["mtc_resilient_training.py", "mtc_cluster_setup.py", "mtc_checkpoint_evaluation.py"])
def test_dag_files_import_nothing_heavy(name):
    """Parse time stays close to an empty DAG's: no JAX, Orbax, Kubernetes or Google client at import."""
    code = (
        "import importlib.util, json, sys\n"
        f"spec = importlib.util.spec_from_file_location('dagfile', {str(REPO / 'dags' / name)!r})\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
