"""The run view of a GKE-shaped run, and of runs that are not training runs (issue 35 items 1, 4, 5).

Airflow's real metadata database holds the run: a DAG ran with dag.test() pushes the XComs the launch task pushes,
then its task instance is put where a deferred try is: state `deferred` and a row in Airflow's `trigger` table with
the JobSetTrigger's kwargs (connection, namespace, name). The cluster is the Kubernetes API double
(tests/doubles/kubernetes.py, real HTTP, read through the real kubernetes client from an Airflow Kubernetes
connection's `kube_config_path`): it lists the JobSet's pods by label and answers `read log` with `tailLines` and
`timestamps=true` as the Pod v1 API reference documents. The leader's lines are MaxText's
(`completed step: N, seconds: X, TFLOP/s/device: ..., loss: ...`, absl prefix: core.measure.step_log).
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from mtc_provider.core.basics.labels import run_labels

from tests.plugins.support import defer, run_pod

DAGS = Path(__file__).parent / "dags"
T0 = 1_796_000_000.0
STEP_S = 2048 / 900  # Llama-2-70B on v6e (facts.md, "A real run's cadence")
LEADER = "train-a1-slice-0-0-aaaaa"


def maxtext_line(step: int) -> str:
    return (f"I1202 08:00:00.123456 140 metric_logger.py:196] completed step: {step}, seconds: {STEP_S:.3f}, "
            f"TFLOP/s/device: 412.000, Tokens/s/device: 900.000, total_weights: 2048, loss: 2.345")


@pytest.fixture
def shapes(monkeypatch, airflow_db):
    """Run a DAG of dags/run_view_shapes.py; returns (client of the plugin's app, run id)."""
    from airflow.utils.session import create_session

    from mtc_provider.plugins import run_view

    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps([
        {"name": "mtc-plugin-tests", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
         "kwargs": {"path": str(DAGS)}}]))
    spec = importlib.util.spec_from_file_location("run_view_shapes", DAGS / "run_view_shapes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(run_view, "_read_access", lambda: [])  # read access granted (the auth manager's part)
    app = run_view.create_app()

    def session():
        with create_session() as s:
            yield s

    app.dependency_overrides[run_view._session_dep()] = session
    client = TestClient(app)

    def run(name: str, progress: dict | None = None, attempts: list | None = None, ledger: dict | None = None) -> str:
        monkeypatch.setenv("MTC_TEST_MTC_RUN", json.dumps({"checkpoint_dir": "gs://ckpt/runs/r/checkpoints",
                                                            "target_step": 4000, "run_name": "r"}))
        monkeypatch.setenv("MTC_TEST_ATTEMPTS", json.dumps(attempts if attempts is not None else [
            {"attempt": 1, "jobset": "train-a1", "start": T0, "end": None, "outcome": None, "restarts": 0}]))
        monkeypatch.setenv("MTC_TEST_PROGRESS", json.dumps(progress or {}))
        if ledger is not None:
            monkeypatch.setenv("MTC_TEST_LEDGER", json.dumps(ledger))
        else:
            monkeypatch.delenv("MTC_TEST_LEDGER", raising=False)
        when = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(days=run.n)
        run.n += 1
        dag_run = getattr(module, name).test(logical_date=when, run_after=when)
        assert dag_run.state == "success"
        return dag_run.run_id

    run.n = 1
    return client, run


def deferred(run_id: str, state: str = "deferred", jobset: str = "train-a1") -> None:
    """The launch try as Airflow holds a deferred one: its trigger row (the JobSetTrigger's kwargs) and state."""
    defer("mtc_gke_shaped", run_id, jobset, state=state)


def own_pod(cluster, name: str, run_id: str, host: int = 0) -> None:
    """A pod of the run's JobSet train-a1, with the labels the JobSet controller and the launch operator give it."""
    run_pod(cluster, name, "mtc_gke_shaped", run_id, jobset="train-a1", host=host)


def view(client, dag_id: str, run_id: str) -> dict:
    answer = client.get(f"/api/runs/{dag_id}/{run_id}")
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_the_step_moves_with_the_leaders_log_lines_not_the_progress_interval(cluster, shapes):
    """Item 1: the trigger's last report (step 100, five minutes old) is overtaken by the leader's newest line at
    the next page refresh; a new line moves the step at the refresh after it; the rate is the lines' own.
    Item 2: the restore MaxText logged at the start, long out of the log's tail, is shown."""
    client, run = shapes
    stale = {"step": 100, "target_step": 4000, "steps_per_hour": 1000.0, "source": "workload-log",
             "updated_at": T0 + 300}
    run_id = run("gke_shaped", progress=stale)
    own_pod(cluster, LEADER, run_id)
    own_pod(cluster, "train-a1-slice-0-1-bbbbb", run_id, host=1)
    import time

    now = time.time()
    cluster.write_log(LEADER, *[f"I1202 config key_{i}: value" for i in range(300)], at=now - 400)
    cluster.write_log(LEADER, "I1202 checkpoint manager exists so trying to load this run's existing checkpoint",
                      "I1202 restoring from this run's directory step 100", at=now - 399)
    for i, step in enumerate(range(101, 241)):
        cluster.write_log(LEADER, maxtext_line(step), at=now - (240 - step) * STEP_S)
    cluster.write_log(LEADER, "I1202 saving checkpoint 200 to the local tier")
    deferred(run_id)
    shown = view(client, "mtc_gke_shaped", run_id)
    live = shown["live"]
    assert shown["cluster_error"] is None, shown["cluster_error"]
    assert live["step"] == 240 and live["source"] == "reported by the leader's log", live
    assert live["steps_per_hour"] == pytest.approx(3600 / STEP_S, rel=0.02), live
    assert live["eta_seconds"] == pytest.approx((4000 - 240) * STEP_S, rel=0.02)
    assert [(r["step"], r["at"]) for r in shown["restores"]] == [(100, pytest.approx(now - 399, abs=0.01))]
    cluster.write_log(LEADER, maxtext_line(241))
    assert view(client, "mtc_gke_shaped", run_id)["live"]["step"] == 241
    assert any(r.path.endswith(f"/pods/{LEADER}/log") and r.query.get("timestamps", "").lower() == "true"
               for r in cluster.requests), "the log was not read with the kubelet's timestamps"


def test_between_attempts_the_page_says_what_it_waits_for(cluster, shapes):
    """Item 4: capacity (a pod Unschedulable with the scheduler's message), an image pull, the retry delay:
    no ETA, and the try shows waiting, not running."""
    client, run = shapes
    run_id = run("gke_shaped", progress={"step": 100, "target_step": 4000, "steps_per_hour": 900.0,
                                         "source": "workload-log", "updated_at": T0})
    cluster.pods.append({
        "metadata": {"name": LEADER, "namespace": "default", "labels": {
            "jobset.sigs.k8s.io/jobset-name": "train-a1", "jobset.sigs.k8s.io/job-index": "0",
            "batch.kubernetes.io/job-completion-index": "0",
            **run_labels("mtc_gke_shaped", run_id, "train", "r")}},
        "status": {"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/12 nodes are available: 12 Insufficient google.com/tpu."}]}})
    deferred(run_id)
    shown = view(client, "mtc_gke_shaped", run_id)
    assert shown["waiting_for"].startswith("capacity: pod " + LEADER)
    assert "12 Insufficient google.com/tpu" in shown["waiting_for"]
    assert shown["live"]["eta"] == "waiting" and shown["attempts"][-1]["outcome"] == "waiting", shown

    cluster.pods[0]["status"] = {"phase": "Pending", "containerStatuses": [{
        "name": "jax-tpu", "ready": False, "restartCount": 0, "image": "us-docker.pkg.dev/p/r/maxtext:bad",
        "imageID": "", "state": {"waiting": {"reason": "ImagePullBackOff",
                                             "message": "Back-off pulling image \"maxtext:bad\""}}}]}
    assert view(client, "mtc_gke_shaped", run_id)["waiting_for"].startswith(
        f"the image pull: pod {LEADER} ImagePullBackOff")

    deferred(run_id, state="up_for_retry")
    shown = view(client, "mtc_gke_shaped", run_id)
    assert shown["waiting_for"].startswith("Airflow's retry delay before try 2"), shown["waiting_for"]
    assert shown["live"]["eta"] == "waiting"


def test_an_unrelated_run_has_a_silent_page_and_the_tabs_name_the_launch_operator(shapes):
    """Item 5: the tab of a run without a launch task (and of another task of a training run) is a static note
    with no script: nothing polls. The tabs carry `applies_to` for a UI that hides them (apache/airflow #69148)."""
    from mtc_provider.plugins.run_view import MtcRunViewPlugin

    client, run = shapes
    other = run("unrelated")
    page = client.get(f"/runs/mtc_unrelated/{other}")
    assert page.status_code == 200 and "no MtcJobSetOperator task" in page.text
    assert "<script" not in page.text and "fetch(" not in page.text
    assert view(client, "mtc_unrelated", other)["running"] is False

    training = run("gke_shaped")
    deferred(training, state="running")  # a running training run: its own tab polls...
    assert "<script" in client.get(f"/runs/mtc_gke_shaped/{training}").text
    assert "<script" in client.get(f"/runs/mtc_gke_shaped/{training}?task=train").text
    note = client.get(f"/runs/mtc_gke_shaped/{training}?task=after").text  # ...another task's tab does not
    assert "<script" not in note and "not this run's launch task" in note

    tabs = {v["destination"]: v for v in MtcRunViewPlugin.external_views}
    for destination in ("dag_run", "task_instance"):
        assert tabs[destination]["applies_to"] == {"operators": ["MtcJobSetOperator"]}
    assert "applies_to" not in tabs["nav"]
    # Airflow 3.3.2's response model (what /api/v2/plugins hands the UI) passes the key through unchanged.
    from airflow.api_fastapi.core_api.datamodels.plugins import ExternalViewResponse

    dumped = ExternalViewResponse.model_validate(tabs["dag_run"]).model_dump()
    assert dumped["applies_to"] == {"operators": ["MtcJobSetOperator"]}


def test_goodput_while_running_and_the_chart_drawn_by_the_api_server(cluster, shapes):
    """Items 2 and 3: while the GKE-shaped run goes on, goodput so far from its attempts and progress, and a chart
    the api-server draws from the run's data; its title's wall time is the summary's."""
    import io
    import time

    from PIL import Image

    from mtc_provider.core.measure.progress_report import format_duration

    client, run = shapes
    now = time.time()
    attempts = [{"attempt": 1, "jobset": "train-a0", "start": now - 3600, "end": now - 1900, "outcome": "disrupted",
                 "restarts": 0, "last_step": 700, "reason": "JobSet failed"},
                {"attempt": 2, "jobset": "train-a1", "start": now - 1800, "end": None, "outcome": None,
                 "restarts": 0}]
    run_id = run("gke_shaped", attempts=attempts, progress={
        "step": 900, "target_step": 4000, "steps_per_hour": 1500.0, "source": "workload-log",
        "updated_at": now - 300})
    own_pod(cluster, LEADER, run_id)
    for step in range(1001, 1011):
        cluster.write_log(LEADER, maxtext_line(step), at=now - (1011 - step) * STEP_S)
    deferred(run_id)
    shown = view(client, "mtc_gke_shaped", run_id)
    goodput = shown["goodput"]
    assert goodput is not None and goodput["final"] is False and "attempts" in goodput["source"], goodput
    assert 0 < goodput["goodput"] < 1 and goodput["disruptions"] == 1
    assert shown["chart_url"].endswith("/chart.png")
    answer = client.get(f"/runs/mtc_gke_shaped/{run_id}/chart.png")
    assert answer.status_code == 200 and answer.headers["content-type"] == "image/png"
    info = Image.open(io.BytesIO(answer.content)).info
    assert info["Title"].startswith(f"goodput {100 * goodput['goodput']:.1f}% over "
                                    f"{format_duration(goodput['elapsed_s'])}"), (info, goodput)


def test_only_the_providers_trigger_row_is_read_as_a_jobset_watch(cluster, shapes):
    """A deferred launch task whose trigger is another class (here another package's class of the same name, with
    kwargs of the same shape) is not watching a JobSet: the view reads no cluster for it. The provider's
    JobSetTrigger (the classpath its serialize() writes) is read."""
    from mtc_provider.triggers.jobset import JobSetTrigger

    client, run = shapes
    run_id = run("gke_shaped")
    own_pod(cluster, LEADER, run_id)
    cluster.write_log(LEADER, maxtext_line(300))
    defer("mtc_gke_shaped", run_id, "train-a1", classpath="other_provider.triggers.JobSetTrigger")
    shown = view(client, "mtc_gke_shaped", run_id)
    assert shown["live"]["step"] is None and shown["cluster_error"] is None, shown["live"]
    assert cluster.requests == [], "a row of another trigger class was read as a JobSet watch"

    classpath, _ = JobSetTrigger(connection={"kind": "kubernetes", "kubernetes_conn_id": "c"}, namespace="default",
                                 name="train-a1").serialize()
    defer("mtc_gke_shaped", run_id, "train-a1", classpath=classpath)
    assert view(client, "mtc_gke_shaped", run_id)["live"]["step"] == 300


def test_a_gke_shaped_day_with_its_ledger(cluster, shapes):
    """The day of tests/core/day_run.py, moved to end now, read from Airflow's database: the launch task's `ledger`
    XCom gives goodput from its intervals, the progress XCom the live in-cluster restart; attempts and tries are two
    numbers and each row's log link opens its own try."""
    import time

    from tests.core import day_run

    by = time.time() - day_run.NOW
    run_id = shapes[1]("gke_shaped", attempts=day_run.shifted(day_run.ATTEMPTS, by),
                       progress=day_run.shifted(day_run.PROGRESS, by), ledger=day_run.shifted(day_run.ledger(), by))
    deferred(run_id, jobset="train-a3")
    shown = view(shapes[0], "mtc_gke_shaped", run_id)
    assert shown["goodput"]["goodput"] == pytest.approx(day_run.EXPECTED_GOODPUT, abs=0.01), shown["goodput"]
    assert shown["goodput"]["source"] == "so far, from the run ledger's intervals"
    assert [(r["attempt"], r["try"], r["restarts"]) for r in shown["attempts"]] == [(1, 1, 0), (2, 1, 0), (3, 2, 1)]
    assert shown["attempts"][2]["log_url"].endswith(f"/dags/mtc_gke_shaped/runs/{quote(run_id, safe='')}/tasks/"
                                                    "train?try_number=2")
    tiers = {c["tier"]: c for c in shown["checkpoints"]}
    assert (tiers["persistent"]["count"], tiers["replicator"]["newest"]) == (0, 50400)
    assert shown["interruptions"]["by_kind"] == {"preemption": 1, "preemption-new-attempt": 1, "host-loss": 1}


def test_without_matplotlib_the_page_names_the_extra(cluster, shapes, monkeypatch):
    """An api-server installed without the `chart` extra: no chart link that would answer 404, the line to install."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "matplotlib" else real(name, *args))
    client, run = shapes
    shown = view(client, "mtc_gke_shaped", run("gke_shaped"))
    assert shown["chart_url"] is None
    assert "`chart` extra" in shown["chart_missing"] and "[chart]" in shown["chart_missing"], shown["chart_missing"]


def test_the_runs_list_shows_what_an_on_call_engineer_scans(cluster, shapes, monkeypatch):
    """The list page (the "Training runs" entry of the navigation): each run's state, step, rate, ETA, goodput,
    interruptions and newest restorable step, from Airflow's database only (no cluster read per row)."""
    import time

    from airflow.api_fastapi import app as airflow_app

    from mtc_provider.plugins import run_view
    from tests.core import day_run

    by = time.time() - day_run.NOW
    client, run = shapes
    run_id = run("gke_shaped", attempts=day_run.shifted(day_run.ATTEMPTS, by),
                 progress=day_run.shifted(day_run.PROGRESS, by), ledger=day_run.shifted(day_run.ledger(), by))
    deferred(run_id, jobset="train-a3")

    class ReadsThisDag:  # the auth manager's answer for a user who may read mtc_gke_shaped
        def get_authorized_dag_ids(self, **_):
            return {"mtc_gke_shaped"}

    monkeypatch.setattr(airflow_app, "get_auth_manager", lambda: ReadsThisDag())
    client.app.dependency_overrides[run_view._user_dep()] = lambda: None
    unreadable = run("gke_shaped", attempts=[{"attempt": "x", "start": 1.0}])  # another run, a record it cannot read
    page = client.get("/")
    assert page.status_code == 200, page.text
    other = page.text.split(f"<tr data-run='{unreadable}'>")[1].split("</tr>")[0]
    assert "not readable: the attempts XCom of task train[0].attempt: &#x27;x&#x27; is not allowed" in other, other
    row = page.text.split(f"<tr data-run='{run_id}'>")[1].split("</tr>")[0]
    cells = dict(part.split("'>", 1) for part in row.split("<td data-column='")[1:])
    shown = {k: v.split("</td>")[0] for k, v in cells.items()}
    assert shown == {"state": "running", "step": "51,650 / 4,000 (100.0%)", "rate": "1,800 steps/h", "ETA": "0s",
                     "goodput": "95.7% so far", "interruptions": "3",
                     "newest restorable step": "50,400 (MTC replicator backup)"}
    assert cluster.requests == [], "the list read the cluster"
