"""The demo's summary (scripts/demo.py) counts in-cluster restarts from what the launch operator recorded.

The records are shaped as MtcJobSetOperator writes them (provider/mtc_provider/operators/jobset.py: `_submit`'s
record `{"attempt", "jobset", "start", "end", "outcome", "restarts", "last_step", "reason"}`, closed by
`RunLock.close_attempt` with the JobSet's `status.restarts` and pushed whole as the `attempts` XCom by `_push`; the return value is
`{"jobset_name", "namespace", "attempt", "restarts", "last_step", "reason"}`). JobSet counts every restart of its
failurePolicy in `status.restarts` (kubernetes-sigs/jobset api/jobset/v1alpha2/jobset_types.go, `Restarts`).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest

from mtc_provider.core.attempt.attempt_records import in_cluster_restarts
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.definition.description.jobset_names import attempt_name

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def demo(monkeypatch):
    """scripts/demo.py as a module; importing it must not repoint this process's Airflow home."""
    before = dict(os.environ)
    spec = importlib.util.spec_from_file_location("mtc_demo_script", REPO / "scripts" / "demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert dict(os.environ) == before, "importing scripts/demo.py changed the environment"
    return module


def record(attempt: int, jobset: str, restarts: int, outcome: str, last_step: int) -> dict:
    return {"attempt": attempt, "jobset": jobset, "start": 1000.0 + attempt, "end": 1100.0 + attempt,
            "outcome": outcome, "restarts": restarts, "last_step": last_step, "reason": ""}


def test_demo_summary_counts_in_cluster_restarts(demo):
    # Two host kills on slice 0 one step apart: the trigger logged "restart 1" and "restart 2" on one JobSet.
    # The run name is long enough that the attempt name is cut (core.definition.description.jobset_names.attempt_name): a count
    # guessed from the runner's log folder names would find no folder of this run and report 0.
    run_name = "demo-two-host-kills-same-slice-one-step"
    jobset = attempt_name(run_name, "mtc_resilient_training", "manual__2026-12-01", "train", 1)
    assert not jobset.startswith(run_name)
    recorded = {
        "run_state": "success",
        "train_tries": 1,
        "train": {"jobset_name": jobset, "namespace": "default", "attempt": 1, "restarts": 2, "last_step": 70,
                  "reason": "target step reached"},
        "attempts": [record(1, jobset, 2, "finished", 70)],
        "goodput": {},
    }
    summary = demo.build_summary(recorded, events=[], faults=[], wall_s=42.0)
    assert summary["restarts_total"] == 2
    assert summary["restarts"] == "2 (attempt 1: 2)"


def test_demo_summary_adds_restarts_across_attempts(demo):
    # A chaos-suite shaped run: hard faults restart in the cluster, a preemption and a hang each end an attempt,
    # the Airflow kill's try is reattached (its record is the lock's one, closed by the resumed try).
    names = [attempt_name("chaos", "mtc_resilient_training", "r", "train", n) for n in (1, 2, 3)]
    attempts = [record(1, names[0], 3, "disrupted", 20), record(2, names[1], 0, "disrupted", 35),
                record(3, names[2], 4, "finished", 90)]
    recorded = {"run_state": "success", "train_tries": 3, "attempts": attempts,
                "train": {"jobset_name": names[2], "attempt": 3, "restarts": 4}}
    summary = demo.build_summary(recorded, events=[], faults=[], wall_s=1.0)
    assert summary["restarts_total"] == 7
    assert summary["restarts"] == "7 (attempt 1: 3, attempt 2: 0, attempt 3: 4)"


def test_demo_summary_without_attempts_xcom_uses_the_train_result(demo):
    recorded = {"run_state": "failed", "train_tries": 1, "attempts": None,
                "train": {"jobset_name": "mtc-demo-abcde-a1", "attempt": 1, "restarts": 1}}
    assert demo.build_summary(recorded, events=[], faults=[], wall_s=1.0)["restarts_total"] == 1
    assert demo.build_summary({"train": {}, "attempts": None}, [], [], 1.0)["restarts_total"] == 0


def test_restart_records_counted_once_per_jobset():
    same = record(2, "mtc-demo-abcde-a2", 1, "disrupted", 10)
    later = {**same, "restarts": 3}
    assert in_cluster_restarts([same, later]).by_attempt == {2: 3}
    assert in_cluster_restarts([later, same]).by_attempt == {2: 3}  # restarts only grow: the larger figure


@pytest.mark.parametrize("bad, field", [
    ({"attempt": 1, "restarts": -1}, "attempts[0].restarts"),
    ({"attempt": 1, "restarts": "2"}, "attempts[0].restarts"),
    ({"attempt": None, "restarts": 1}, "attempts[0].attempt"),
    ("a1", "attempts[0]"),
])
def test_restart_records_refuse_a_bad_record_by_field(bad, field):
    with pytest.raises(SpecError) as err:
        in_cluster_restarts([bad])
    assert err.value.field == field


SUMMARIZE = """
import importlib.util, json, os, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("demo", sys.argv[1])
demo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(demo)
demo.LOCAL_HOME = Path(os.environ["MTC_LOCAL_HOME"])  # the run's home, not the demo's
print("SUMMARY " + json.dumps(demo.summarize(sys.argv[2], 0.0), default=str))
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_demo_summary_counts_two_restarts_of_a_real_run(tmp_path):
    """The sample DAG on the local target (light workload), two host kills on slice 0 one step apart, a run name
    whose attempt name is cut: the summary, read back from Airflow's database, says 2 (~60 s)."""
    import json
    import signal
    import subprocess
    import sys

    from mtc_local.shared.state import Home, read_json

    airflow_home, local_home = tmp_path / "airflow", tmp_path / "local"
    airflow_home.mkdir()
    local_home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW_HOME=str(airflow_home), MTC_LOCAL_HOME=str(local_home), AIRFLOW__CORE__LOAD_EXAMPLES="False",
               AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "dags"), MTC_RUNNER_IDLE_SECONDS="3", MTC_GCS_IDLE_SECONDS="3",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    airflow = str(Path(sys.executable).parent / "airflow")
    run_name = "demo-two-host-kills-same-slice-one-step"
    conf = {"checkpointing": {"run_name": run_name, "steps": 16, "local_checkpoint_period": 2, "checkpoint_period": 6},
            "workload": {"extra_flags": {"step_time_ms": 400}, "max_restarts": 4,
                         "command": ["python", "-m", "mtc_local.light_workload"]},
            "stall_timeout": 60,
            "fault_plan": [{"kind": "sigkill_host", "at_step": 8, "slice": 0, "host": 0},
                           {"kind": "sigkill_host", "at_step": 9, "slice": 0, "host": 0}]}
    try:
        migrate = subprocess.run([airflow, "db", "migrate"], env=env, capture_output=True, text=True, timeout=120)
        assert migrate.returncode == 0, migrate.stdout[-2000:] + migrate.stderr[-2000:]
        run = subprocess.run([airflow, "dags", "test", "mtc_resilient_training", "-c", json.dumps(conf)], env=env,
                             capture_output=True, text=True, timeout=200)
        log = run.stdout + run.stderr
        assert run.returncode == 0, log[-4000:]
        assert "restart 2 (" in log, log[-4000:]  # the trigger saw both restarts
        read = subprocess.run([sys.executable, "-c", SUMMARIZE, str(REPO / "scripts" / "demo.py"), run_name],
                              env=env, capture_output=True, text=True, timeout=60)
        line = next((x for x in read.stdout.splitlines() if x.startswith("SUMMARY ")), None)
        assert line, read.stdout[-2000:] + read.stderr[-2000:]
        summary = json.loads(line.removeprefix("SUMMARY "))
        assert "success" in summary["run_state"], summary
        assert summary["restarts_total"] == 2, summary
    finally:  # the supervisor by its pid (it kills what is left), then its tmpfs tree
        home = Home.of(local_home)
        info = read_json(home.supervisor_file)
        if info:
            try:
                os.kill(int(info["pid"]), signal.SIGTERM)
            except ProcessLookupError:
                pass
        shutil.rmtree(home.shm_root, ignore_errors=True)


def test_demo_says_where_to_open_the_run_view(demo):
    start, url = demo.run_view_hint("manual__2026-12-01T10:00:00+00:00", port=8081)
    assert "api-server --host 127.0.0.1 --port 8081" in start and f"AIRFLOW_HOME={demo.AIRFLOW_HOME}" in start
    # The run id percent-encoded as one path segment: the plugin's route /mtc/runs/<dag_id>/<run_id>.
    assert url.startswith("http://127.0.0.1:8081/mtc/runs/mtc_resilient_training/"
                          "manual__2026-12-01T10%3A00%3A00%2B00%3A00 ")
    assert demo.run_view_hint(None)[1].startswith("http://127.0.0.1:8080/mtc/ ")


def test_demo_summary_lists_each_restore_of_the_run_once(demo):
    # Two hosts, two host kills: each start's two processes both write `restore` (the workload's events, one file
    # per process); the summary names two restores, as its faults table has two faults that restored.
    def restore(ts, process, step):
        return {"ts": ts, "event": "restore", "process": process, "step": step, "tier": "local", "duration_s": 0.2}

    steps = [{"ts": float(s), "event": "step", "step": s} for s in range(1, 30)]
    events = steps + [restore(10.5, 0, 8), restore(10.6, 1, 8), restore(20.5, 1, 16), restore(20.5, 0, 16)]
    faults = [{"ts": 10.2, "kind": "sigkill_host", "slice": 0, "host": 1},
              {"ts": 20.2, "kind": "sigkill_host", "slice": 0, "host": 0}]
    summary = demo.build_summary({"train": {}, "attempts": None}, events, faults, 1.0)
    assert summary["restores"] == ["step 8 (local)", "step 16 (local)"]
    assert [f["restored_step"] for f in summary["faults"]] == [8, 16]
