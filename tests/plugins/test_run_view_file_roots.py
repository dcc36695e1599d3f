"""The run view serves files only under `[mtc] run_view_file_roots` (adapters/file_roots.py), whatever an XCom names.

Issue 33: task code, and any user the auth manager lets write XComs, can name any path in the launch task's
`mtc_run` XCom (`checkpoint_dir`, even `/`) and in the goodput task's `chart_path`. Through the plugin's FastAPI app
(read access granted, Airflow's real session and XComs planted by a DAG's task code), the UI's password file and a
cluster token are answered 404 on both file routes, as is a symlink in the root that points out; a file under the
root still serves.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from mtc_provider.adapters.file_roots import allowed

DAGS = Path(__file__).parent / "dags"
RUN = "/runs/mtc_planted_xcoms/"


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A local home with a run in its bucket folder, and secrets beside it (outside the buckets)."""
    local = tmp_path / "local"
    run = local / "buckets" / "b" / "e2e"
    (run / "checkpoints" / "10").mkdir(parents=True)
    (run / "checkpoints" / "10" / "data").write_text("weights")
    (run / "goodput.png").write_bytes(b"\x89PNG chart")
    (tmp_path / "simple_auth_manager_passwords.json").write_text('{"admin": "s3cret"}')
    (local / "cluster").mkdir()
    (local / "cluster" / "admin-token").write_text("token")
    monkeypatch.setenv("MTC_LOCAL_HOME", str(local))
    monkeypatch.delenv("AIRFLOW__MTC__RUN_VIEW_FILE_ROOTS", raising=False)
    return tmp_path


@pytest.fixture
def planted(monkeypatch, airflow_db):
    """Run the planting DAG with the given XCom values; the client reads that run through the plugin's app."""
    from airflow.utils.session import create_session

    from mtc_provider.plugins import run_view

    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps([
        {"name": "mtc-plugin-tests", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
         "kwargs": {"path": str(DAGS)}}]))
    spec = importlib.util.spec_from_file_location("planted_xcoms", DAGS / "planted_xcoms.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(run_view, "_read_access", lambda: [])  # read access granted (the auth manager's part)
    days = iter(range(1, 400))

    def plant(checkpoint_dir: str, chart: str):
        monkeypatch.setenv("MTC_TEST_PLANTED_DIR", checkpoint_dir)
        monkeypatch.setenv("MTC_TEST_PLANTED_CHART", chart)
        when = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(days=next(days))
        run = module.planted.test(logical_date=when, run_after=when)
        assert run.state == "success"
        app = run_view.create_app()

        def session():
            with create_session() as s:
                yield s

        app.dependency_overrides[run_view._session_dep()] = session
        return TestClient(app), RUN + run.run_id

    return plant


def assert_drawn_not_served(answer) -> None:
    """The chart route draws the run's chart itself (issue 35 item 3): never the bytes of a file an XCom names."""
    assert answer.status_code == 200 and answer.content.startswith(b"\x89PNG\r\n\x1a\n"), answer.content[:200]
    assert b"s3cret" not in answer.content and answer.content != b"token" and answer.content != b"\x89PNG chart"


def test_a_planted_xcom_cannot_serve_the_password_file_or_a_token(home, planted):
    client, run = planted("/", str(home / "simple_auth_manager_passwords.json"))
    for path in (f"{home}/simple_auth_manager_passwords.json"[1:], f"{home}/local/cluster/admin-token"[1:], ""):
        answer = client.get(f"{run}/files/checkpoints/{path}")
        assert answer.status_code == 404, (path, answer.text)
        assert "s3cret" not in answer.text and "token" != answer.text
    assert_drawn_not_served(client.get(f"{run}/chart.png"))
    view = client.get(run.replace("/runs/", "/api/runs/", 1)).json()
    assert "folder_url" not in view  # the page links nothing it would not serve

    client, run = planted(str(home / "local" / "cluster"), str(home / "local" / "cluster" / "admin-token"))
    assert client.get(f"{run}/files/checkpoints/admin-token").status_code == 404
    assert_drawn_not_served(client.get(f"{run}/chart.png"))


def test_a_symlink_in_the_root_pointing_out_is_not_followed(home, planted):
    run_dir = home / "local" / "buckets" / "b" / "e2e"
    (run_dir / "checkpoints" / "out").symlink_to(home)
    (run_dir / "chart-link.png").symlink_to(home / "simple_auth_manager_passwords.json")
    (home / "local" / "buckets" / "escape").symlink_to(home)
    client, run = planted(str(run_dir / "checkpoints"), str(run_dir / "chart-link.png"))
    assert client.get(f"{run}/files/checkpoints/out/simple_auth_manager_passwords.json").status_code == 404
    assert_drawn_not_served(client.get(f"{run}/chart.png"))
    # A checkpoint_dir that enters the root through a link out of it resolves outside: refused too.
    client, run = planted(str(home / "local" / "buckets" / "escape"), "")
    assert client.get(f"{run}/files/checkpoints/simple_auth_manager_passwords.json").status_code == 404


def test_files_under_the_root_still_serve(home, planted):
    run_dir = home / "local" / "buckets" / "b" / "e2e"
    client, run = planted(str(run_dir / "checkpoints"), str(run_dir / "goodput.png"))
    assert client.get(f"{run}/files/checkpoints/10/data").text == "weights"
    assert "data" in client.get(f"{run}/files/checkpoints/10/").text
    assert_drawn_not_served(client.get(f"{run}/chart.png"))  # drawn from the run's data, not the file (issue 35)
    view = client.get(run.replace("/runs/", "/api/runs/", 1)).json()
    assert view["folder_url"].endswith("/files/checkpoints/") and view["chart_url"].endswith("/chart.png")


def test_the_roots_are_configurable(home, monkeypatch):
    """`[mtc] run_view_file_roots`: comma-separated absolute paths; they replace the default `<local home>/buckets`."""
    other = home / "data"
    other.mkdir()
    (other / "x").write_text("x")
    assert allowed(other / "x") is None
    monkeypatch.setenv("AIRFLOW__MTC__RUN_VIEW_FILE_ROOTS", f"{other}, relative/ignored")
    assert allowed(other / "x") == (other / "x").resolve()
    assert allowed(home / "local" / "buckets" / "b" / "e2e" / "goodput.png") is None
