"""The training DAG loaded as the DAG processor would, from the sample DAGs' bundle, for dag.test() runs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TRAINING_DAG_FILE = REPO / "dags" / "mtc_resilient_training.py"


def load_training_dag(monkeypatch, tmp_path, module_name: str):
    """The sample training DAG with its local home under tmp_path; dag.test() syncs it from the sample bundle."""
    monkeypatch.setenv("MTC_LOCAL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps([
        {"name": "mtc-sample-dags", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
         "kwargs": {"path": str(REPO / "dags")}}]))
    spec = importlib.util.spec_from_file_location(module_name, TRAINING_DAG_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag
