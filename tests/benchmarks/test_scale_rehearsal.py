"""Benchmark 8 (scale rehearsal): its statistics, log parsing, timestamps and legs, the statement counter, and a
small run of the benchmark (its topology arm, real processes: marked slow)."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import query_counter
from benchmarks.scale_rehearsal import (
    dag_source,
    distribution,
    epoch,
    legs,
    percentile,
    scheduler_loops,
    state_mismatches,
    summarize,
    triggerer_lags,
)

REPO = Path(__file__).resolve().parents[2]
# Lines as Airflow 3.3's triggerer and scheduler write them (copied from a run of the topology).
TRIGGERER_LOG = """\
2026-11-30T10:13:40.861050Z [info     ] Triggerer's async thread was blocked for 0.10 seconds, exceeding the configured warning threshold of 0.00 seconds. This is likely caused by a badly-written trigger. Set PYTHONASYNCIODEBUG=1 to get more information on overrunning coroutines. [airflow.jobs.triggerer_job_runner] loc=triggerer_job_runner.py:1046
2026-11-30T10:13:40.975365Z [info     ] trigger scale-topo-0 starting [airflow.jobs.triggerer_job_runner]
2026-11-30T10:13:41.087340Z [info     ] Triggerer's async thread was blocked for 0.35 seconds, exceeding the configured warning threshold of 0.00 seconds. This is likely caused by a badly-written trigger. Set PYTHONASYNCIODEBUG=1 to get more information on overrunning coroutines. [airflow.jobs.triggerer_job_runner] loc=triggerer_job_runner.py:1046
"""
SCHEDULER_LOG = """\
2026-11-30T10:13:42.898175Z [debug    ] Ran scheduling loop in 507.42 ms [airflow.jobs.scheduler_job_runner.SchedulerJobRunner] loc=scheduler_job_runner.py:1867
2026-11-30T10:13:43.001000Z [debug    ] Next timed event is in 0.500000 [airflow.jobs.scheduler_job_runner.SchedulerJobRunner]
2026-11-30T10:13:44.091674Z [debug    ] Ran scheduling loop in 193.00 ms [airflow.jobs.scheduler_job_runner.SchedulerJobRunner] loc=scheduler_job_runner.py:1867
"""


def test_percentile_interpolates_between_ranks_like_numpy():
    values = [5.0, 1.0, 4.0, 2.0, 3.0, None]
    assert percentile(values, 50) == 3.0
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 5.0
    assert percentile(values, 90) == pytest.approx(4.6)  # numpy.percentile([1..5], 90)
    assert percentile(list(range(1, 101)), 99) == pytest.approx(99.01)
    assert percentile([None], 50) is None
    with pytest.raises(ValueError, match="within 0 and 100"):
        percentile([1.0], 101)


def test_distribution_counts_only_measured_values():
    assert distribution([0.5, None, 1.5], 2) == {"n": 2, "p50": 1.0, "p90": 1.4, "p99": 1.49, "max": 1.5}
    assert distribution([]) == {"n": 0, "p50": None, "p90": None, "p99": None, "max": None}


def test_triggerer_lag_is_the_watchdog_time_beyond_its_own_sleep():
    assert triggerer_lags(TRIGGERER_LOG) == pytest.approx([0.0, 0.25])


def test_scheduler_loop_times_come_from_its_own_log_line():
    assert scheduler_loops(SCHEDULER_LOG) == [507.42, 193.0]


def test_stale_executor_events_that_failed_a_task_are_found():
    line = ("2026-11-30T10:50:28.940246Z [error    ] Executor LocalExecutor(parallelism=4) reported that the task "
            "instance <TaskInstance: mtc_resilient_training.checkpoint_progress scale-sqli-1 [queued] "
            "ti_id=01a22c10-1e0e-76d6-b755-dbfb7b2ce0b5> finished with state success, but the task instance's state "
            "attribute is queued. Learn more: https://airflow.apache.org/docs/apache-airflow/stable/"
            "troubleshooting.html#task-state-changed-externally [airflow.task] loc=taskinstance.py:1878\n")
    assert state_mismatches(SCHEDULER_LOG + line) == [
        {"task": "checkpoint_progress", "run": "scale-sqli-1", "executor_state": "success", "ti_state": "queued"}]


def test_timestamps_from_postgresql_and_sqlite_agree():
    aware = dt.datetime(2026, 11, 30, 10, 0, 1, 250000, tzinfo=dt.timezone.utc)
    assert epoch(aware) == epoch("2026-11-30 10:00:01.250000") == epoch("2026-11-30T10:00:01.25Z")
    assert epoch("1970-01-01 00:00:01.500000") == epoch("1970-01-01 01:00:01.5+01:00") == 1.5
    assert epoch(None) is None


def test_legs_follow_fault_try_end_try_start_next_jobset():
    fault = epoch("2026-11-30 10:00:00")
    tries = {1: {"end_date": "2026-11-30 10:00:04.000000"}, 2: {"start_date": "2026-11-30 10:00:07.500000"}}
    out = legs(fault, tries, {1: fault - 10, 2: fault + 8.75})
    assert out == {"fault_to_try1_end_s": 4.0, "try1_end_to_try2_start_s": 3.5, "try2_start_to_next_jobset_s": 1.25,
                   "fault_to_next_jobset_s": 8.75}
    assert legs(None, {}, {})["fault_to_next_jobset_s"] is None  # a run that never resubmitted


def test_the_benchmark_dag_is_the_sample_with_only_max_active_runs_raised():
    sample = (REPO / "dags" / "mtc_resilient_training.py").read_text()
    derived = dag_source(50)
    assert "max_active_runs=50," in derived and "max_active_runs=1," not in derived
    assert derived.replace("max_active_runs=50,", "max_active_runs=1,") == sample


def test_summary_states_goals_and_ratios():
    def arm(p99, per_run, ok=True):
        return {"all_succeeded": ok, "window_s": 100.0, "resubmission": {"fault_to_next_jobset_s": {"p50": 1.0, "p99": p99}},
                "triggerer_lag_s": {"p99": 0.02}, "scheduler_loop_ms": {"p50": 100.0, "p99": 400.0},
                "db": {"statements_per_run": per_run, "statements_per_run_above_idle": per_run / 2}}

    # the goal: p99 at most retry_delay (3 s) + 30 s (issue 28)
    out = summarize({"topology": arm(36.0, 600.0), "sqlite": arm(18.0, 300.0, ok=False)})
    assert out["topology"] == {"every_run_succeeded": True, "resubmission_p99_s": 36.0,
                               "resubmission_p99_goal_met": False}
    assert out["sqlite"]["resubmission_p99_goal_met"] and not out["sqlite"]["every_run_succeeded"]
    assert out["ratio_topology_to_sqlite"]["resubmission_p99"] == 2.0
    assert out["ratio_topology_to_sqlite"]["statements_per_run"] == 2.0


def test_query_counter_counts_every_statement_per_process(tmp_path: Path):
    """A real SQLAlchemy engine (SQLite) in a fresh interpreter; a forked child keeps its own count."""
    code = f"""
import os, sqlalchemy
from benchmarks.query_counter import install
install({str(tmp_path)!r})
engine = sqlalchemy.create_engine("sqlite://")
with engine.connect() as conn:
    for _ in range(7):
        conn.execute(sqlalchemy.text("SELECT 1"))
pid = os.fork()
if pid == 0:
    with engine.connect() as conn:
        for _ in range(5):
            conn.execute(sqlalchemy.text("SELECT 2"))
    raise SystemExit(0)  # a normal exit: the child's count is written by its atexit flush
os.waitpid(pid, 0)
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    counts = sorted(int(p.read_text()) for p in tmp_path.glob("*.count"))
    assert counts == [5, 7]
    assert query_counter.total(tmp_path) == 12


def test_local_settings_install_the_counter():
    text = query_counter.LOCAL_SETTINGS.format(directory="/x/queries")
    assert "install('/x/queries')" in text
    compile(text, "airflow_local_settings.py", "exec")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_small_rehearsal_runs_one_faulted_run_through_the_deployed_topology(tmp_path: Path):
    """The benchmark's machinery end to end on its topology arm (the deployment as documented: CeleryExecutor,
    PostgreSQL), one run: the run is faulted, so it takes both paths of a run (an attempt that fails, then the
    resubmission that succeeds), and every figure of an arm is measured. Concurrency is what `make` users measure
    with `--runs 50`.

    The SQLite arm is left to the benchmark itself (issue 36): it meets Airflow's stale-executor-event race
    (apache/airflow#66374, docs/benchmarks.md benchmark 8), a race of Airflow's that is the benchmark's finding and
    does not belong in the default suite's assertions. Its Airflow is the e2e harness's (tests/e2e), the
    topology-to-SQLite ratios are test_summary_states_goals_and_ratios's, and the race's log line is
    test_stale_executor_events_that_failed_a_task_are_found's."""
    out = tmp_path / "scale.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.scale_rehearsal", "--arms", "topology", "--runs", "1",
                           "--idle-s", "2", "--timeout", "420", "--output", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=880)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert set(result["arms"]) == {"topology"}
    topology = result["arms"]["topology"]
    assert "error" not in topology, topology.get("error")
    assert topology["runs"] == 1 and topology["killed_at_teardown"] == [], topology
    assert topology["triggerer_lag_s"]["n"] > 0 and topology["scheduler_loop_ms"]["n"] > 0
    assert topology["db"]["statements_per_run"] > 0
    assert topology["succeeded"] == topology["runs"] == 1 and topology["resubmitted"] == 1, topology["per_run"]
    (run,) = topology["per_run"]
    assert run["faults"] == 1 and 2 in run["jobsets"], run  # the fault ended attempt 1; attempt 2 trained on
    resub = topology["resubmission"]["fault_to_next_jobset_s"]
    assert resub["n"] == 1 and 0 < resub["p50"] <= resub["p99"]
    assert topology["db"]["pg_stat_database"]["xact_commit"] > 0
    assert isinstance(result["summary"]["topology"]["resubmission_p99_goal_met"], bool)
