"""keep_failed_attempts and the run's record through a real Airflow (dag.test() on SQLite, the in-memory JobSet
api), then `mtc status` / `mtc list` / `mtc delete` reading them back; the shared connection options.

The in-memory cluster keeps a deleted JobSet gone and records each delete's reason, as the local API server's audit
does (tests/rehearsal/cluster/test_delete_audit.py); the record is a real file beside the run's checkpoint directory.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest
from typer.testing import CliRunner

from tests.support.js_helpers import ckpt_dir, finalize, reach
from mtc_provider.cli.app import app
from mtc_provider.operators.jobset import MtcDeleteJobSetOperator, kept_failed
from tests.doubles.memory_jobset import status_completed, status_failed, status_running
from tests.support.jobset_fixtures import load_bundle_dags

pytestmark = pytest.mark.timeout(300)
LOGICAL = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
runner = CliRunner()


@pytest.fixture
def dags(monkeypatch, tmp_path, airflow_db):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return load_bundle_dags(monkeypatch, tmp_path, "mtc_jobset_dags.py")


def test_keep_failed_attempts_keeps_the_newest_failed_one_and_the_record_outlives_the_jobsets(dags, tmp_path,
                                                                                             cluster):
    cluster.plan(
        [status_running(), reach(tmp_path, 20, status_failed(restarts=2))],
        [status_running(), reach(tmp_path, 40, status_failed())],
        [status_running(), reach(tmp_path, 100, status_completed())],
    )
    dr = dags.keep_failed.test(logical_date=LOGICAL, run_after=LOGICAL)
    assert dr.state == "success"
    a1, a2, a3 = cluster.created
    # Before attempt 2, failed attempt 1 stayed; before attempt 3, only the newest failed one (2) stayed.
    assert cluster.delete_reasons == [(a1, "attempt-ended")]
    assert sorted(cluster.live()) == [a2, a3]

    record = json.loads((tmp_path / "out" / "llama" / "mtc-attempts.json").read_text())
    assert record["state"] == "succeeded" and record["checkpoint_dir"] == ckpt_dir(tmp_path)
    assert [(a["attempt"], a["jobset"], a["outcome"]) for a in record["attempts"]] == [
        (1, a1, "disrupted"), (2, a2, "disrupted"), (3, a3, "finished")]
    assert record["dag_run"]["dag_id"] == "mtc_keep_failed"

    # The teardown (with the launch's JobSets gone from the lock) deletes what is left, saying who asked.
    ti = dr.get_task_instance("train")

    class Context(dict):
        pass

    teardown = MtcDeleteJobSetOperator(task_id="teardown", run_name="llama", launch_task_id="train",
                                       target={"kind": "local", "home": str(tmp_path / "home")})
    fake_ti = type("TI", (), {"dag_id": ti.dag_id, "run_id": ti.run_id, "task_id": "teardown", "map_index": -1,
                               "try_number": 1, "xcom_pull": lambda self, **kw: None})()
    assert sorted(teardown.execute(Context(ti=fake_ti))) == [a1, a2, a3]  # a1 still terminating: listed
    assert cluster.live() == []

    # After the teardown: the record still answers, with no cluster at all.
    base = str(tmp_path / "out")
    status = runner.invoke(app, ["status", "llama", "--base", base, "-o", "json"])
    assert status.exit_code == 0, status.output
    data = json.loads(status.stdout)
    assert data["state"] == "succeeded" and data["newest_step"] == 100 and data["target_step"] == 100
    assert [(a["attempt"], a["phase"], a["in_cluster"]) for a in data["attempts"]] == [
        (1, "deleted", False), (2, "deleted", False), (3, "deleted", False)]
    listed = runner.invoke(app, ["list", "--base", base, "-o", "json"])
    assert listed.exit_code == 0, listed.output
    (row,) = json.loads(listed.stdout)
    assert (row["run_name"], row["state"], row["step"], row["attempts"], row["restarts"]) == (
        "llama", "succeeded", 100, 3, 2)
    waited = runner.invoke(app, ["status", "llama", "--base", base, "--wait", "--timeout", "5"])
    assert waited.exit_code == 0 and "Run llama in namespace default: succeeded" in waited.stdout


def test_delete_by_name_of_the_run_says_who_asked_and_keeps_the_checkpoints(dags, tmp_path, cluster):
    from tests.cli.test_js_cli_status import attempt_body

    cluster.plan([status_running()], [status_running()])
    for name, attempt in (("train-x-a1", 1), ("train-x-a2", 2)):
        cluster.create("default", attempt_body(tmp_path, name, attempt))
        cluster.advance("default", name)
    finalize(ckpt_dir(tmp_path), 10)
    home = ["--local-home", str(tmp_path / "home")]
    refused = runner.invoke(app, ["delete", "llama", *home], input="n\n")
    assert refused.exit_code == 1 and "training" in refused.stderr and cluster.delete_reasons == []
    one = runner.invoke(app, ["delete", "llama", "--attempt", "1", "--yes", *home])
    assert one.exit_code == 0, one.output
    assert cluster.delete_reasons == [("train-x-a1", "user-request")]
    assert "asked by " in one.stdout and "@" in one.stdout
    rest = runner.invoke(app, ["delete", "llama", "--yes", "--wait", "--timeout", "10", *home])
    assert rest.exit_code == 0, rest.output
    assert cluster.delete_reasons[-1] == ("train-x-a2", "user-request") and cluster.live() == []
    assert (tmp_path / "out" / "llama" / "checkpoints" / "10" / "commit_success.txt").is_file()
    nothing = runner.invoke(app, ["delete", "llama", *home])
    assert nothing.exit_code == 1 and "nothing to delete" in nothing.stderr


def test_bad_options_name_the_option_before_any_request(tmp_path):
    for command in (["list"], ["status", "r"], ["logs", "r"], ["delete", "r"], ["unlock", "r"]):
        result = runner.invoke(app, [*command, "--project", "p"])
        assert result.exit_code == 2 and "--project/--location/--cluster" in result.stderr, (command, result.output)
    result = runner.invoke(app, ["logs", "r", "--tail", "0", "--local-home", str(tmp_path)])
    assert result.exit_code == 2 and "--tail" in result.stderr


@pytest.mark.parametrize("value, kept", [(0, set()), (1, {"b"}), (5, {"a", "b"})])
def test_kept_failed_counts_only_failed_attempts_newest_first(value, kept):
    def obj(name, attempt, status):
        return {"metadata": {"name": name, "labels": {"mtc.airflow.apache.org/try-number": str(attempt)}},
                "status": status}

    jobsets = [obj("a", 1, status_failed()), obj("c", 3, status_completed()), obj("b", 2, status_failed())]
    assert kept_failed(jobsets, value) == kept


def test_keep_failed_attempts_must_be_a_count(dags, cluster):
    from airflow.sdk.exceptions import AirflowFailException

    op = MtcDeleteJobSetOperator(task_id="t", run_name="llama", launch_task_id="train", keep_failed_attempts=-1)
    with pytest.raises(AirflowFailException, match="keep_failed_attempts.*-1.*integer >= 0"):
        op.execute({"ti": None})
    assert cluster.created == [] and cluster.delete_reasons == []


def test_the_training_dag_passes_keep_failed_attempts_from_its_form():
    import importlib.util

    from tests.conftest import REPO

    spec = importlib.util.spec_from_file_location("training_dag", REPO / "dags" / "mtc_resilient_training.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.PARAMS["keep_failed_attempts"].value == 0
    assert module.dag.get_task("train").keep_failed_attempts == "{{ ti.xcom_pull(task_ids='plan')['keep_failed_attempts'] }}"
    assert module.dag.get_task("teardown").keep_failed_attempts == 0  # the teardown deletes kept ones


def test_status_from_the_record_when_the_cluster_does_not_answer(tmp_path, monkeypatch, fast_retries):
    from mtc_provider.adapters.run_records import RunRecords
    from mtc_provider.core.attempt.run_summary import run_record

    monkeypatch.delenv("KUBECONFIG", raising=False)
    where = str(tmp_path / "out" / "r" / "checkpoints")
    RunRecords(where).write(where, run_record(
        run_name="r", namespace="default", checkpoint_dir=where, target_step=10, state="failed",
        attempts=[{"attempt": 1, "jobset": "r-x-a1", "start": 1.0, "end": 2.0, "outcome": "failed", "restarts": 0,
                   "last_step": None, "reason": "crash loop"}], owner={"dag_id": "d"}, now=3.0))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{name: c, cluster: "
                          "{server: 'http://127.0.0.1:9'}}]\nusers: [{name: u, user: {token: t}}]\n"
                          "contexts: [{name: c, context: {cluster: c, user: u}}]\n")
    result = runner.invoke(app, ["status", "r", "--kubeconfig", str(kubeconfig), "--base", str(tmp_path / "out"),
                                 "-o", "json"])
    assert result.exit_code == 0, result.output
    assert "the cluster did not answer" in result.stderr
    data = json.loads(result.stdout)
    assert data["state"] == "failed" and [a["phase"] for a in data["attempts"]] == ["deleted"]
    waited = runner.invoke(app, ["status", "r", "--base", str(tmp_path / "out"), "--wait"])
    assert waited.exit_code == 1  # scripts: the run ended, and not in success


def test_list_from_the_records_when_the_cluster_does_not_answer(tmp_path, monkeypatch, fast_retries):
    """`mtc list` as `mtc status`: a cluster that does not answer leaves the runs' records (the e2e CLI day found a
    local cluster's supervisor gone, once idle after the run, between the check that it ran and the list)."""
    from mtc_provider.adapters.run_records import RunRecords
    from mtc_provider.core.attempt.run_summary import run_record

    monkeypatch.delenv("KUBECONFIG", raising=False)
    where = str(tmp_path / "out" / "r" / "checkpoints")
    RunRecords(where).write(where, run_record(
        run_name="r", namespace="default", checkpoint_dir=where, target_step=10, state="succeeded",
        attempts=[{"attempt": 1, "jobset": "r-x-a1", "start": 1.0, "end": 2.0, "outcome": "finished", "restarts": 0,
                   "last_step": 10, "reason": "done"}], owner={"dag_id": "d"}, now=3.0))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{name: c, cluster: "
                          "{server: 'http://127.0.0.1:9'}}]\nusers: [{name: u, user: {token: t}}]\n"
                          "contexts: [{name: c, context: {cluster: c, user: u}}]\n")
    result = runner.invoke(app, ["list", "--kubeconfig", str(kubeconfig), "--base", str(tmp_path / "out"),
                                 "-o", "json"])
    assert result.exit_code == 0, result.output
    assert "the cluster did not answer" in result.stderr
    (row,) = json.loads(result.stdout)
    assert (row["run_name"], row["state"], row["attempts"]) == ("r", "succeeded", 1)
    alone = runner.invoke(app, ["list", "--kubeconfig", str(kubeconfig), "-o", "json"])
    assert alone.exit_code == 1  # no records to fall back on: the cluster's error, as before
