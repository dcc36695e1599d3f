"""Under DAG-level authorization the run view reads, for a user, only what belongs to the runs of the DAGs they may
read: the run's own folder and the run's own JobSet's pods, whatever an XCom or a trigger row names.

Airflow's real api-server app (plugins mounted by Airflow, Airflow's JWT check and DAG access dependency) with an
auth manager granting per-DAG access (per_dag_auth.py). Two teams' DAGs, `mtc_dag_a` (alice) and `mtc_dag_b`
(bob), keep their runs under the same default root. A's launch task names B's checkpoint folder in its `mtc_run`
XCom (task code or a user with XCom write access can), and A's trigger row names B's JobSet.
"""

from __future__ import annotations

from tests.plugins.support import defer, run_pod, write_record

from mtc_provider.links.run_view import PREFIX


def test_a_user_of_dag_a_reads_none_of_dag_bs_files_through_as_xcom(home, run_dag, airflow_api):
    client, login = airflow_api
    run_b_folder = home / "local" / "buckets" / "b" / "team-b-run"
    (run_b_folder / "checkpoints" / "10").mkdir(parents=True)
    (run_b_folder / "checkpoints" / "10" / "data").write_text("team B's weights")
    (run_b_folder / "checkpoints" / "10" / "commit_success.txt").write_text("")
    (run_b_folder / "events").mkdir()
    (run_b_folder / "events" / "process-0.jsonl").write_text('{"ts": 1.0, "event": "step", "step": 10}\n')
    write_record(run_b_folder, "mtc_dag_b")  # B's launch operator wrote its record at submission
    run_b = run_dag("mtc_dag_b", str(run_b_folder / "checkpoints"))
    run_a = run_dag("mtc_dag_a", str(run_b_folder / "checkpoints"))  # A's XCom names B's folder
    alice, bob = login("alice", "mtc_dag_a"), login("bob", "mtc_dag_b")

    file_a = f"{PREFIX}/runs/mtc_dag_a/{run_a}/files/checkpoints/10/data"
    answer = client.get(file_a, headers=alice)
    assert answer.status_code == 404 and "team B" not in answer.text, answer.text
    assert client.get(f"{PREFIX}/runs/mtc_dag_a/{run_a}/files/checkpoints/", headers=alice).status_code == 404
    view = client.get(f"{PREFIX}/api/runs/mtc_dag_a/{run_a}", headers=alice)
    assert view.status_code == 200, view.text
    shown = view.json()
    assert "folder_url" not in shown
    assert shown["live"]["step"] is None  # B's step events are not A's
    assert [c["steps"] for c in shown["checkpoints"] if c["tier"] == "persistent"] == [[]]
    # Airflow's own check: alice may not open B's run at all; bob reads his own run's files.
    assert client.get(f"{PREFIX}/runs/mtc_dag_b/{run_b}/files/checkpoints/10/data", headers=alice).status_code == 403
    assert client.get(f"{PREFIX}/runs/mtc_dag_b/{run_b}/files/checkpoints/10/data", headers=bob).text == \
        "team B's weights"
    shown = client.get(f"{PREFIX}/api/runs/mtc_dag_b/{run_b}", headers=bob).json()
    assert shown["folder_url"].endswith("/files/checkpoints/") and shown["live"]["step"] == 10


def test_a_user_of_dag_a_sees_none_of_dag_bs_jobset_through_as_trigger_row(home, run_dag, airflow_api, cluster):
    client, login = airflow_api
    run_b = run_dag("mtc_dag_b", "gs://team-b/run/checkpoints")
    run_a = run_dag("mtc_dag_a", "gs://team-a/run/checkpoints")
    run_pod(cluster, "train-b1-slice-0-0-aaaaa", "mtc_dag_b", run_b, jobset="train-b1")
    cluster.write_log("train-b1-slice-0-0-aaaaa", "I1202 08:00:00.1 1 metric_logger.py:196] completed step: 77, "
                      "seconds: 2.000, TFLOP/s/device: 1.0, Tokens/s/device: 1.0, total_weights: 1, loss: 2.0")
    defer("mtc_dag_b", run_b, "train-b1")
    defer("mtc_dag_a", run_a, "train-b1")  # A's row names B's JobSet
    alice, bob = login("alice", "mtc_dag_a"), login("bob", "mtc_dag_b")

    shown = client.get(f"{PREFIX}/api/runs/mtc_dag_a/{run_a}", headers=alice).json()
    assert shown["live"]["step"] is None, shown["live"]
    assert "train-b1-slice" not in str(shown) and "77" not in str(shown["live"])
    assert not any(r.path.endswith("/log") for r in cluster.requests)  # no pod of B's was read for alice
    shown = client.get(f"{PREFIX}/api/runs/mtc_dag_b/{run_b}", headers=bob).json()
    assert shown["live"]["step"] == 77 and shown["cluster_error"] is None, shown
