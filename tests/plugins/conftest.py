"""The run view's test set-up: a local home with runs in its bucket folder, DAG runs whose task code plants the
XComs the view reads, the Kubernetes API double as a cluster connection, and Airflow's real api-server app (its
plugins, its JWT login, an auth manager granting per-DAG access: per_dag_auth.py) in process.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
from pathlib import Path

import pytest

from tests.doubles.kubernetes import KubernetesApiDouble
from tests.plugins.support import CONN, write_record

DAGS = Path(__file__).parent / "dags"


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A local home with a run of `mtc_planted_xcoms` in its bucket folder, and secrets beside it."""
    local = tmp_path / "local"
    run = local / "buckets" / "b" / "e2e"
    (run / "checkpoints" / "10").mkdir(parents=True)
    (run / "checkpoints" / "10" / "data").write_text("weights")
    (run / "goodput.png").write_bytes(b"\x89PNG chart")
    write_record(run, "mtc_planted_xcoms")
    (tmp_path / "simple_auth_manager_passwords.json").write_text('{"admin": "s3cret"}')
    (local / "cluster").mkdir()
    (local / "cluster" / "admin-token").write_text("token")
    monkeypatch.setenv("MTC_LOCAL_HOME", str(local))
    monkeypatch.delenv("AIRFLOW__MTC__RUN_VIEW_FILE_ROOTS", raising=False)
    return tmp_path


@pytest.fixture
def run_dag(monkeypatch, airflow_db):
    """run_dag(dag_id, checkpoint_dir, chart="") runs a DAG of dags/planted_xcoms.py with dag.test(); its run id."""
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps([
        {"name": "mtc-plugin-tests", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
         "kwargs": {"path": str(DAGS)}}]))
    spec = importlib.util.spec_from_file_location("planted_xcoms", DAGS / "planted_xcoms.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dags = {d.dag_id: d for d in (module.planted, module.dag_a, module.dag_b)}
    days = iter(range(1, 400))

    def run(dag_id: str, checkpoint_dir: str, chart: str = "") -> str:
        monkeypatch.setenv("MTC_TEST_PLANTED_DIR", checkpoint_dir)
        monkeypatch.setenv("MTC_TEST_PLANTED_CHART", chart)
        when = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(days=next(days))
        dag_run = dags[dag_id].test(logical_date=when, run_after=when)
        assert dag_run.state == "success"
        return dag_run.run_id

    return run


@pytest.fixture
def plugin_client(monkeypatch):
    """The plugin's own FastAPI app with read access granted (the auth manager's part, tested on `airflow_api`)."""
    from fastapi.testclient import TestClient

    from airflow.utils.session import create_session

    from mtc_provider.plugins import run_view

    monkeypatch.setattr(run_view, "_read_access", lambda: [])
    app = run_view.create_app()

    def session():
        with create_session() as s:
            yield s

    app.dependency_overrides[run_view._session_dep()] = session
    return TestClient(app)


@pytest.fixture
def airflow_api(monkeypatch, airflow_db):
    """Airflow's api-server app (airflow.api_fastapi.app.create_app: the plugin mounted at its url_prefix by
    Airflow, Airflow's JWT check, its DAG access dependency) with the per-DAG auth manager. Returns
    (client, login): login(user, *dag_ids) grants the user read access to those DAGs and gives the headers of a
    JWT the auth manager signed for them (what `POST /auth/token` answers)."""
    from fastapi.testclient import TestClient

    from airflow.api_fastapi import app as api_app
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    monkeypatch.setenv("AIRFLOW__CORE__AUTH_MANAGER", "tests.plugins.per_dag_auth.PerDagAuthManager")
    granted: dict[str, list[str]] = {}
    api_app.purge_cached_app()
    app = api_app.create_app("core")

    def login(user: str, *dag_ids: str) -> dict[str, str]:
        granted[user] = list(dag_ids)
        monkeypatch.setenv("MTC_TEST_DAG_GRANTS", json.dumps(granted))
        token = api_app.get_auth_manager().generate_jwt(SimpleAuthManagerUser(username=user, role="viewer"))
        return {"Authorization": f"Bearer {token}"}

    with TestClient(app) as client:
        yield client, login
    api_app.purge_cached_app()


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """The Kubernetes API double as the Airflow Kubernetes connection CONN reaches it (a kubeconfig file)."""
    from mtc_provider.adapters import run_cluster

    double = KubernetesApiDouble().start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "double",
        "clusters": [{"name": "double", "cluster": {"server": double.url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "double", "context": {"cluster": "double", "user": "u"}}]}))
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN.upper()}",
                       json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}))
    monkeypatch.setattr(run_cluster, "CACHE_SECONDS", 0.0)  # every request reads the cluster (the page's pace)
    run_cluster._cache.clear()
    yield double
    double.stop()
