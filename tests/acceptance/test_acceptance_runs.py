"""Issue 27: a run's life from the CLI after a real DAG run on the local target (Airflow in a subprocess, the local
API server and runner, the local GCS, the light workload).

Attempt 1 is SIGKILLed with no in-cluster restart left, so its JobSet fails and an Airflow retry submits attempt 2;
with keep_failed_attempts=1 the failed JobSet is not deleted before the next submit (it stands beside attempt 2)
and the teardown keeps it. After the teardown: `mtc status` and `mtc list -o json` report both attempts from the
run's record in the bucket (the run lock that held them is gone), `mtc logs --attempt 1` prints the leader pod's
lines through the Kubernetes API, and `mtc delete --wait` removes the kept JobSet, recorded in the cluster's delete
audit with the asking user and the reason.
"""

from __future__ import annotations

import getpass
import json
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mtc_provider.cli.app import app
from mtc_provider.core.basics import labels as L
from mtc_provider.core.attempt.status import evaluate_jobset
from mtc_local.cluster.client import LocalCluster
from mtc_local.shared.state import read_jsonl
from tests.acceptance.conftest import NAMESPACE, AirflowEnv
from tests.acceptance.test_acceptance_airflow import finish_dag, start_dag

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
HERE = Path(__file__).parent


def test_status_list_logs_delete_after_a_real_run_with_a_kept_failed_attempt(airflow_env: AirflowEnv,
                                                                           tmp_path: Path, monkeypatch,
                                                                           record_figure) -> None:
    sys.path.insert(0, str(HERE / "dags"))
    try:
        import acceptance_runs as dag_module
    finally:
        sys.path.remove(str(HERE / "dags"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    home = airflow_env.local_home.root
    api = LocalCluster(str(home))
    run_name = dag_module.RUN_NAME

    # OpenLineage events through the provider's listener, to a file (openlineage-python's FileTransport).
    events_file = tmp_path / "openlineage.jsonl"
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__TRANSPORT", json.dumps(
        {"type": "file", "log_file_path": str(events_file), "append": True}))
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__NAMESPACE", "mtc-tests")

    started = time.monotonic()
    proc = start_dag(airflow_env, HERE / "dags" / "acceptance_runs.py", "mtc_acceptance_runs", {},
                     tmp_path / "runs.log")
    side_by_side = None  # (failed attempt 1, attempt 2) seen in the cluster together, during the run
    while proc.poll() is None and time.monotonic() - started < 400:
        objs = {o["metadata"]["name"]: evaluate_jobset(o).phase for o in api.list(NAMESPACE)}
        first = [n for n in objs if n.endswith("-a1")]
        if first and objs[first[0]] == "failed" and any(n.endswith("-a2") for n in objs):
            side_by_side = objs
        time.sleep(0.2)
    result = finish_dag(proc, tmp_path / "runs.log", 60)
    log = (tmp_path / "runs.log").read_text()
    # attempt 1 made progress (step 4) before its SIGKILL: attempt 2 follows in the same try (no retry spent)
    assert "success" in result["state"] and result["tries"]["train"] == 1, log[-4000:]
    assert side_by_side is not None, log[-4000:]
    assert "keeping failed JobSet" in log and "keep_failed_attempts=1" in log

    # After the teardown: only the kept failed attempt is left; the run lock is gone.
    left = api.list(NAMESPACE)
    assert [(o["metadata"]["name"][-3:], evaluate_jobset(o).phase) for o in left] == [("-a1", "failed")]
    a1 = left[0]["metadata"]["name"]
    a2 = a1[:-1] + "2"
    audit = read_jsonl(airflow_env.local_home.delete_audit_file)
    jobset_deletes = [(r["path"].rsplit("/", 1)[-1], r["reason"]) for r in audit if "/jobsets/" in r["path"]]
    assert jobset_deletes == [(a2, "teardown")]  # attempt 1 was never deleted before attempt 2
    assert any(r["path"].endswith(L.lock_name(run_name)) for r in audit)

    cli = CliRunner()
    where = ["--local-home", str(home)]
    status = cli.invoke(app, ["status", run_name, *where, "-o", "json"])
    assert status.exit_code == 0, status.output
    data = json.loads(status.stdout)
    assert data["state"] == "succeeded" and data["recorded"] and data["newest_step"] == dag_module.STEPS
    assert [(a["attempt"], a["name"], a["phase"], a["in_cluster"]) for a in data["attempts"]] == [
        (1, a1, "failed", True), (2, a2, "deleted", False)]
    assert data["attempts"][1]["outcome"] == "finished" and data["attempts"][0]["outcome"] == "disrupted"
    assert data["attempts"][0]["start"] <= data["attempts"][0]["end"] <= data["attempts"][1]["start"]
    assert Path(data["checkpoint_dir"]).parent.joinpath("mtc-attempts.json").is_file()

    listed = cli.invoke(app, ["list", *where, "-o", "json"])
    assert listed.exit_code == 0, listed.output
    (row,) = [r for r in json.loads(listed.stdout) if r["run_name"] == run_name]
    assert (row["state"], row["attempts"], row["step"], row["target_step"], row["eta_s"]) == (
        "succeeded", 2, dag_module.STEPS, dag_module.STEPS, None)
    assert row["age_s"] > 0 and row["live_jobsets"] == []
    text = cli.invoke(app, ["list", *where])
    assert text.stdout.splitlines()[0].split() == ["RUN", "STATE", "STEP", "ETA", "ATTEMPTS", "AGE"]
    assert text.stdout.splitlines()[1].split()[:5] == [run_name, "succeeded", "24/24", "-", "2"]

    logs = cli.invoke(app, ["logs", run_name, "--attempt", "1", *where])
    assert logs.exit_code == 0, logs.output
    steps = [int(line.split(":")[1].split(",")[0]) for line in logs.stdout.splitlines()
             if line.startswith("completed step:")]
    assert steps and steps[0] == 1 and steps[-1] < dag_module.STEPS, logs.stdout[-2000:]
    followed = cli.invoke(app, ["logs", run_name, "--attempt", "1", "--follow", "--poll", "0.2", *where])
    assert followed.exit_code == 0, followed.output  # the attempt has ended: its lines, then the command returns
    assert [line for line in followed.stdout.splitlines() if line.startswith("completed step:")] == [
        line for line in logs.stdout.splitlines() if line.startswith("completed step:")]
    gone = cli.invoke(app, ["logs", run_name, "--attempt", "2", *where])
    assert gone.exit_code == 1 and "no longer in the cluster" in gone.stderr

    deleted = cli.invoke(app, ["delete", run_name, *where, "--wait", "--timeout", "60"])
    assert deleted.exit_code == 0, deleted.output
    assert api.list(NAMESPACE) == []
    (user_delete,) = [r for r in read_jsonl(airflow_env.local_home.delete_audit_file)
                      if r["path"].endswith(a1)]
    assert user_delete["reason"] == "user-request" and user_delete["caller"].startswith(f"{getpass.getuser()}@")
    after = json.loads(cli.invoke(app, ["status", run_name, *where, "-o", "json"]).stdout)
    assert [a["phase"] for a in after["attempts"]] == ["deleted", "deleted"] and after["state"] == "succeeded"

    # OpenLineage: the bucket, the launch and the progress sensor name the checkpoint directory (or its bucket).
    events = [json.loads(line) for line in events_file.read_text().splitlines() if line.strip()]
    completes = {e["job"]["name"].rsplit(".", 1)[-1]: e for e in events if e["eventType"] == "COMPLETE"}
    checkpoints = ("file", data["checkpoint_dir"])
    named = {task: ([(d["namespace"], d["name"]) for d in e.get("inputs") or []],
                    [(d["namespace"], d["name"]) for d in e.get("outputs") or []])
             for task, e in completes.items()}
    assert named["bucket"] == ([], [(f"gs://{dag_module.BUCKET}", "/")]), named
    assert named["train"] == ([checkpoints], [checkpoints]), named
    assert named["checkpoint_progress"] == ([checkpoints], []), named
    record_figure("run_life", {"wall_s": round(time.monotonic() - started, 1), "attempts": 2})
