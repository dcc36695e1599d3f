"""Fixtures for the tests of the JobSet glue (operators, triggers, hook, CLI, links): fast retry waits, the fake API
server, the in-memory cluster, bundle DAGs; each folder's conftest.py imports the ones its tests use."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from mtc_provider import targets
from mtc_provider.adapters import retry
from tests.doubles.memory_jobset import AsyncMemoryJobSetApi, MemoryJobSetApi, MemoryJobSetCluster

DAGS = Path(__file__).parent / "dags"


@pytest.fixture
def cluster():
    """The in-memory JobSet cluster, registered as the "local" target's api for the test."""
    cluster = MemoryJobSetCluster()
    with targets.registered_jobset_api("local", lambda c: MemoryJobSetApi(cluster), lambda c: AsyncMemoryJobSetApi(cluster)):
        yield cluster


def load_bundle_dags(monkeypatch, tmp_path, filename: str):
    """Load a DAG file of tests/support/dags with paths under tmp_path; dag.test() syncs it from that bundle."""
    monkeypatch.setenv("MTC_TEST_JOBSET_HOME", str(tmp_path))
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps([
        {"name": "mtc-jobset-tests", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
         "kwargs": {"path": str(DAGS)}}]))
    spec = importlib.util.spec_from_file_location(Path(filename).stem, DAGS / filename)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def fast_retries(monkeypatch):
    """adapters.retry reads its waits at call time; tests shrink them (the module documents this)."""
    monkeypatch.setattr(retry, "INITIAL_WAIT", 0.001)
    monkeypatch.setattr(retry, "MAX_WAIT", 0.01)


@pytest.fixture
def apiserver():
    """The Kubernetes API double (tests/doubles/kubernetes.py) over plain HTTP, as a kubeconfig reaches it."""
    from tests.doubles.kubernetes import KubernetesApiDouble

    server = KubernetesApiDouble().start()
    yield server
    server.stop()


@pytest.fixture
def outage_cluster(tmp_path):
    """The local API server in process, with its outage switch, as the "local" connection of a home (js_outage.py)."""
    from tests.doubles.js_outage import OutageCluster

    cluster = OutageCluster(tmp_path / "outage-home")
    yield cluster
    cluster.stop()
