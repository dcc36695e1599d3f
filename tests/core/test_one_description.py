"""One run description (core.definition.description.run): the same file is the DAG's form, `mtc plan`'s input and `mtc run`'s conf, and the
same bad value gives the same error (field, value, what is allowed) through `mtc plan FILE`, `mtc run FILE` (which
then sends nothing) and the training DAG's plan task."""

from __future__ import annotations

import copy
import http.server
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from typer.testing import CliRunner

from mtc_provider.cli.app import app
from tests.conftest import sample_dag

REPO = Path(__file__).resolve().parents[2]
LOCAL = yaml.safe_load((REPO / "examples" / "local.yaml").read_text())
GKE = yaml.safe_load((REPO / "examples" / "gke-v6e.yaml").read_text())
runner = CliRunner()


@pytest.fixture(scope="module")
def training_dag():
    return sample_dag("mtc_resilient_training.py", "one_description_training").dag


def plan_task(dag, conf: dict) -> dict:
    """The plan task as Airflow runs it: the form's params with the trigger's conf (Airflow replaces whole params)."""
    params = {key: dag.params[key] for key in dag.params} | conf
    return dag.get_task("plan").python_callable(params=params, dag_run=SimpleNamespace(conf=conf))


class Recorder(http.server.BaseHTTPRequestHandler):
    """A real HTTP server standing in for Airflow's API: it only counts what reaches it."""

    seen: list[str] = []  # every request, "METHOD path"

    def do_GET(self):  # noqa: N802 (http.server's name): the DAG, unpaused (mtc run reads it before triggering)
        Recorder.seen.append(f"GET {self.path}")
        body = b'{"dag_id": "mtc_resilient_training", "is_paused": false}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):  # noqa: N802
        Recorder.seen.append(f"POST {self.path}")
        self.send_response(500)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture()
def recorder():
    Recorder.seen = []
    server = http.server.HTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _bad(path: list[str], value, base: dict = LOCAL):
    described = copy.deepcopy(base)
    node = described
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return described


BAD = [
    (["checkpointing", "checkpoint_period"], 0, "checkpointing.checkpoint_period", "a positive integer"),
    (["checkpointing", "local_checkpoint_period"], 50, "checkpointing.local_checkpoint_period",
     "smaller than checkpoint_period (20)"),
    (["slices", "num_slices"], 1, "slices.num_slices", ">= 2"),
    (["sizing", "buffer"], 0.5, "sizing.buffer", "between 0.10 and 0.15"),
    (["fault_plan"], [{"kind": "sigkill_host", "at_step": 60}], "fault_plan[0].at_step", "below steps (60", 60),
    (["workload", "extra_flags"], {"model_name": "llama"}, "workload.extra_flags.model_name", "model_dim", "llama"),
    (["keep_failed_attempts"], -1, "keep_failed_attempts", "an integer >= 0"),
    (["pod_logs_interval"], 0, "pod_logs_interval", "a number of seconds >= 1"),
    (["pod_logs"], "yes", "pod_logs", "true or false"),
]


# Issue 33 (items 13, 14): rules of the gke example, refused the same way by every entry point.
BAD_GKE = [
    # Only the run's bucket gets the IAM bindings: `mtc plan` alone refused this before.
    (["checkpointing", "base_output_directory"], "gs://other-bucket/out", "checkpointing.base_output_directory",
     "a URL in the run's bucket: gs://my-mtc-checkpoints/"),
    (["bucket", "name"], "my-google-checkpoints", "bucket.name", "nor contains 'google'"),
    (["cluster", "project_id"], "123456789012", "cluster.project_id", "not the project number"),
    (["bucket", "location"], "us-moon1", "bucket.location", "a Cloud Storage location"),
]


@pytest.mark.parametrize("path, value, field, allowed, shown", [(*b, b[1])[:5] for b in BAD], ids=[b[2] for b in BAD])
def test_the_same_bad_value_gives_the_same_error_through_mtc_plan_mtc_run_and_the_dag(
        tmp_path, monkeypatch, training_dag, recorder, path, value, field, allowed, shown):
    same_error_everywhere(tmp_path, monkeypatch, training_dag, _bad(path, value), field, allowed, shown)


@pytest.mark.parametrize("path, value, field, allowed", BAD_GKE, ids=[b[2] for b in BAD_GKE])
def test_gke_rules_give_the_same_error_through_mtc_plan_mtc_run_and_the_dag(
        tmp_path, monkeypatch, training_dag, recorder, path, value, field, allowed):
    described = _bad(path, value, GKE)
    if path == ["bucket", "name"]:  # the output directory follows the bucket, so the name is the one error
        described["checkpointing"]["base_output_directory"] = f"gs://{value}"
    same_error_everywhere(tmp_path, monkeypatch, training_dag, described, field, allowed, value)


def same_error_everywhere(tmp_path, monkeypatch, training_dag, described, field, allowed, shown):
    from airflow.sdk.exceptions import AirflowFailException

    monkeypatch.setenv("MTC_LOCAL_HOME", str(tmp_path / "home"))
    file = tmp_path / "run.yaml"
    file.write_text(yaml.safe_dump(described))

    planned = runner.invoke(app, ["plan", str(file)])
    ran = runner.invoke(app, ["run", str(file), "--api-url", recorder, "--api-token", "t"])
    with pytest.raises(AirflowFailException) as dag_error:
        plan_task(training_dag, described)

    expected = f"{field}: {shown!r} is not allowed; allowed: "
    assert planned.exit_code == 2 and ran.exit_code == 2, (planned.output, ran.output)
    from_plan = planned.output.strip().removeprefix("error: ")
    from_run = ran.output.strip().removeprefix("error: ")
    from_dag = str(dag_error.value).removeprefix("invalid run description: ")
    assert from_plan == from_run == from_dag, (from_plan, from_run, from_dag)
    assert from_plan.startswith(expected) and allowed in from_plan, from_plan
    assert Recorder.seen == []  # invalid: no request was sent


def test_a_valid_file_is_the_dags_run_exactly(tmp_path, monkeypatch, training_dag):
    """What `mtc run` sends (every field explicit) plans in the DAG to the run `mtc plan` validated."""
    from mtc_provider.cli.submit import run_conf
    from mtc_provider.core.definition.description.params import training_run

    monkeypatch.setenv("MTC_LOCAL_HOME", str(tmp_path / "home"))
    conf = run_conf(LOCAL, str(tmp_path / "home"))
    planned = plan_task(training_dag, conf)
    direct = training_run(LOCAL, str(tmp_path / "home"))
    # The same run; the description differs only by the form's bucket section where the file has none (local).
    assert {k: v for k, v in planned.items() if k != "description"} == {
        k: v for k, v in direct.items() if k != "description"}
    assert {**planned["description"], "bucket": None} == direct["description"]
    assert planned["checkpointing"]["checkpoint_period"] == 20 and planned["fault_plan"] == []
    assert planned["workload"]["max_restarts"] == 3  # the file's, not the form's 2


def test_a_local_file_without_an_output_directory_takes_the_servers_home(tmp_path):
    from mtc_provider.cli.submit import run_conf

    described = copy.deepcopy(LOCAL)
    assert "base_output_directory" not in described["checkpointing"]  # the example leaves it to the local home
    conf = run_conf(described, str(tmp_path / "client-home"))
    assert conf["checkpointing"]["base_output_directory"] is None  # the plan task fills in the server's own


def test_mtc_run_without_an_api_url_says_where_to_give_it(tmp_path, monkeypatch):
    for name in ("AIRFLOW_API_URL", "AIRFLOW_URL"):
        monkeypatch.delenv(name, raising=False)
    file = tmp_path / "run.yaml"
    file.write_text(yaml.safe_dump(LOCAL))
    result = runner.invoke(app, ["run", str(file)])
    assert result.exit_code == 2 and "--api-url: None is not allowed" in result.output and "AIRFLOW_API_URL" in \
        result.output


def test_mtc_run_names_the_api_answer_when_the_server_refuses(tmp_path, recorder):
    file = tmp_path / "run.yaml"
    file.write_text(yaml.safe_dump(LOCAL))
    result = runner.invoke(app, ["run", str(file), "--api-url", recorder, "--api-token", "t"])
    assert result.exit_code == 1 and "/api/v2/dags/mtc_resilient_training/dagRuns -> HTTP 500" in result.output
    assert Recorder.seen == ["GET /api/v2/dags/mtc_resilient_training",
                             "POST /api/v2/dags/mtc_resilient_training/dagRuns"]


def test_the_launch_switches_are_description_fields_from_file_to_launch_task(tmp_path, training_dag):
    """keep_failed_attempts, pod_logs, pod_logs_interval and apply_advice are fields of the one description (issue
    35 item 8): a file's values reach the plan (and from it the launch task), and `mtc run` sends them explicitly
    so the form's never fill them."""
    from mtc_provider.cli.submit import run_conf

    described = {**LOCAL, "keep_failed_attempts": 2, "pod_logs": False, "pod_logs_interval": 5,
                 "apply_advice": False}
    conf = run_conf(described, str(tmp_path / "home"))
    assert {k: conf[k] for k in ("keep_failed_attempts", "pod_logs", "pod_logs_interval", "apply_advice")} == {
        "keep_failed_attempts": 2, "pod_logs": False, "pod_logs_interval": 5, "apply_advice": False}
    planned = plan_task(training_dag, conf)
    assert (planned["keep_failed_attempts"], planned["pod_logs"], planned["pod_logs_interval"]) == (2, False, 5)
    left_out = run_conf(LOCAL, str(tmp_path / "home"))  # the description's defaults, explicit
    assert (left_out["keep_failed_attempts"], left_out["pod_logs"], left_out["apply_advice"]) == (0, True, False)
    train = training_dag.get_task("train")
    assert train.keep_failed_attempts == "{{ ti.xcom_pull(task_ids='plan')['keep_failed_attempts'] }}"
    assert set(training_dag.params) - {"target"} <= set(conf) | {"kubernetes_conn_id", "bucket", "cluster",
                                                                  "customization", "checkpoint_configuration_name",
                                                                  # empty unless given: derived from the run
                                                                  "stall_timeout", "step_seconds"}
