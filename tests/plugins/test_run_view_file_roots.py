"""The run view reads files only in the run's own folder under `[mtc] run_view_file_roots`
(adapters/file_roots.py, adapters/airflow_run.run_folder), whatever an XCom names, and refuses roots that would
expose the machine.

Task code, and any user the auth manager lets write XComs, can name any path in the launch task's `mtc_run` XCom
(`checkpoint_dir`, even `/`) and in the goodput task's `chart_path`. Through the plugin's FastAPI app (read access
granted, Airflow's real session and XComs planted by a DAG's task code), the UI's password file and a cluster token
are answered 404, as is a link in the root, pointing out or not; a file under the root still serves.
"""

from __future__ import annotations

import os

import pytest

from mtc_provider.adapters.file_roots import FileRootsError, allowed, configured_roots

RUN = "/runs/mtc_planted_xcoms/"


@pytest.fixture
def planted(run_dag, plugin_client):
    def plant(checkpoint_dir: str, chart: str = ""):
        return plugin_client, RUN + run_dag("mtc_planted_xcoms", checkpoint_dir, chart)

    return plant


def assert_drawn_not_served(answer) -> None:
    """The chart route draws the run's chart itself: never the bytes of a file an XCom names."""
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


def test_no_link_in_the_root_is_followed(home, planted):
    run_dir = home / "local" / "buckets" / "b" / "e2e"
    (run_dir / "checkpoints" / "out").symlink_to(home)
    (run_dir / "checkpoints" / "in").symlink_to(run_dir / "checkpoints" / "10")
    (home / "local" / "buckets" / "escape").symlink_to(home)
    client, run = planted(str(run_dir / "checkpoints"))
    assert client.get(f"{run}/files/checkpoints/out/simple_auth_manager_passwords.json").status_code == 404
    assert client.get(f"{run}/files/checkpoints/in/data").status_code == 404  # a link, even one that stays inside
    assert client.get(f"{run}/files/checkpoints/../../../../simple_auth_manager_passwords.json").status_code == 404
    # A checkpoint_dir that enters the root through a link out of it is outside.
    client, run = planted(str(home / "local" / "buckets" / "escape" / "checkpoints"))
    assert client.get(f"{run}/files/checkpoints/simple_auth_manager_passwords.json").status_code == 404


def test_files_under_the_root_still_serve(home, planted):
    run_dir = home / "local" / "buckets" / "b" / "e2e"
    client, run = planted(str(run_dir / "checkpoints"), str(run_dir / "goodput.png"))
    assert client.get(f"{run}/files/checkpoints/10/data").text == "weights"
    assert "data" in client.get(f"{run}/files/checkpoints/10/").text
    assert client.get(f"{run}/files/checkpoints/10", follow_redirects=False).status_code == 307
    assert_drawn_not_served(client.get(f"{run}/chart.png"))
    view = client.get(run.replace("/runs/", "/api/runs/", 1)).json()
    assert view["folder_url"].endswith("/files/checkpoints/") and view["chart_url"].endswith("/chart.png")


def test_a_listing_never_stats_through_a_link(home, planted):
    """A link's target (a big secret file, a folder outside) shows neither its size nor as a folder."""
    run_dir = home / "local" / "buckets" / "b" / "e2e"
    (home / "big-secret").write_bytes(b"x" * 123_457)
    (run_dir / "checkpoints" / "size-probe").symlink_to(home / "big-secret")
    (run_dir / "checkpoints" / "dir-probe").symlink_to(home)
    client, run = planted(str(run_dir / "checkpoints"))
    page = client.get(f"{run}/files/checkpoints/").text
    assert "size-probe" in page and "123,457" not in page
    assert "dir-probe/" not in page and "10/" in page


def test_the_events_folder_is_never_read_above_a_root(home, planted, monkeypatch):
    """A root that is itself a checkpoint folder: its run folder (and `events/` in it) lies above the root."""
    outside = home / "x"
    (outside / "checkpoints").mkdir(parents=True)
    (outside / "events").mkdir()
    (outside / "events" / "process-0.jsonl").write_text('{"ts": 1.0, "event": "step", "step": 4242}\n')
    from tests.plugins.support import write_record

    write_record(outside, "mtc_planted_xcoms")
    monkeypatch.setenv("AIRFLOW__MTC__RUN_VIEW_FILE_ROOTS", str(outside / "checkpoints"))
    client, run = planted(str(outside / "checkpoints"))
    view = client.get(run.replace("/runs/", "/api/runs/", 1)).json()
    assert view["live"]["step"] is None and "folder_url" not in view, view["live"]


def test_the_roots_are_configurable(home, monkeypatch):
    """`[mtc] run_view_file_roots`: comma-separated absolute paths; they replace the default `<local home>/buckets`."""
    other = home / "data"
    other.mkdir()
    (other / "x").write_text("x")
    assert allowed(other / "x") is None
    monkeypatch.setenv("AIRFLOW__MTC__RUN_VIEW_FILE_ROOTS", f"{other}, {home / 'more'}")
    assert allowed(other / "x") == other / "x"
    assert allowed(home / "local" / "buckets" / "b" / "e2e" / "goodput.png") is None


@pytest.mark.parametrize("root, why", [
    ("/", "is / (every file"),
    ("relative/buckets", "is relative"),
    ("./buckets", "is relative"),
    ("/srv", "is a top-level folder"),
    ("~", "holds the user's home directory"),
    ("AIRFLOW_HOME", "holds AIRFLOW_HOME"),
    ("AIRFLOW_HOME/..", "holds AIRFLOW_HOME"),
])
def test_roots_that_expose_the_machine_are_refused_naming_the_setting(home, monkeypatch, root, why):
    root = root.replace("AIRFLOW_HOME", os.environ["AIRFLOW_HOME"])
    monkeypatch.setenv("AIRFLOW__MTC__RUN_VIEW_FILE_ROOTS", f"{home / 'ok'},{root}")
    with pytest.raises(FileRootsError) as caught:
        configured_roots()
    message = str(caught.value)
    assert "[mtc] run_view_file_roots" in message and repr(root) in message and why in message, message
    assert "allowed: absolute folders" in message


def test_a_refused_root_is_said_by_the_view_not_served(home, planted, monkeypatch):
    run_dir = home / "local" / "buckets" / "b" / "e2e"
    client, run = planted(str(run_dir / "checkpoints"))
    monkeypatch.setenv("AIRFLOW__MTC__RUN_VIEW_FILE_ROOTS", "/")
    answer = client.get(f"{run}/files/checkpoints/10/data")
    assert answer.status_code == 500 and "[mtc] run_view_file_roots" in answer.json()["detail"], answer.text
    answer = client.get(run.replace("/runs/", "/api/runs/", 1))
    assert answer.status_code == 500 and "root '/' is /" in answer.json()["detail"], answer.text


def test_the_run_records_ledger_is_read_from_the_runs_own_folder(home, planted):
    """On the local target the run ledger is also in the run record (`mtc-attempts.json`, key "ledger"): a new try
    clears the launch task's XComs, the record beside the checkpoints keeps it."""
    import json

    from mtc_provider.core.attempt.run_summary import RECORD_FILE

    from tests.core.day_run import ledger

    run_dir = home / "local" / "buckets" / "b" / "e2e"
    record = json.loads((run_dir / RECORD_FILE).read_text())
    (run_dir / RECORD_FILE).write_text(json.dumps({**record, "ledger": ledger()}))
    client, run = planted(str(run_dir / "checkpoints"))
    view = client.get(run.replace("/runs/", "/api/runs/", 1)).json()
    assert [(r["step"], r["tier"]) for r in view["restores"]] == [
        (17100, "replicator"), (30600, "replicator"), (41000, "local")]
