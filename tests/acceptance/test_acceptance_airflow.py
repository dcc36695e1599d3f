"""Issues 4 and 5 acceptance through Airflow: DAG runs in subprocesses (isolated Airflow home on SQLite and
local-target home), the local runner and the real JAX/Orbax workload.

- The task process is SIGKILLed while `train` waits; the same DAG run run again reattaches to the live JobSet:
  exactly one JobSet ever existed, and the run succeeds.
- A hung attempt (SIGSTOP of a slice) is found by the launch trigger's stall detection and resubmitted by an
  Airflow retry within stall_timeout + one poll interval (+ the JobSet's deletion); slow but progressing
  attempts, running longer than stall_timeout, are not flagged.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mtc_provider.adapters.checkpoint_stores import LocalCheckpointStore
from mtc_provider.core.attempt.status import evaluate_jobset
from mtc_local.cluster.client import LocalCluster
from mtc_local.shared.state import read_json
from mtc_provider.adapters.workload_events import read_events
from tests.acceptance.conftest import NAMESPACE, REPO, AirflowEnv

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

HERE = Path(__file__).parent
DRIVER = HERE / "run_dag.py"
LOGICAL_DATE = "2026-01-02T00:00:00+00:00"


def start_dag(env: AirflowEnv, dag_file: Path, dag_id: str, conf: dict[str, Any], log: Path) -> subprocess.Popen:
    """The DAG run in its own session (so the whole tree can be killed), output to `log`."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, str(DRIVER), str(dag_file), dag_id, LOGICAL_DATE, json.dumps(conf)],
            env=env.env(dag_file.parent), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, cwd=str(env.airflow_home),
        )


def finish_dag(proc: subprocess.Popen, log: Path, timeout: float) -> dict[str, Any]:
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"DAG run did not end within {timeout:.0f}s:\n{log.read_text()[-4000:]}")
    lines = [line for line in log.read_text().splitlines() if line.startswith("{") and '"state"' in line]
    assert lines, f"no result line (exit {proc.returncode}):\n{log.read_text()[-4000:]}"
    return json.loads(lines[-1])


def wait_for(predicate, timeout: float, what: str, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def attempt_dirs(env: AirflowEnv, run_name: str) -> list[str]:
    """Every JobSet the runner ever ran for this run: its log folders stay after a delete."""
    logs = env.local_home.root / "logs" / NAMESPACE
    pattern = re.compile(rf"^{re.escape(run_name)}-[0-9a-f]{{5}}-a\d+$")
    return sorted(d.name for d in logs.iterdir() if pattern.match(d.name)) if logs.exists() else []


def restarts_of(env: AirflowEnv, jobset: str) -> list[str]:
    return sorted(d.name for d in (env.local_home.root / "logs" / NAMESPACE / jobset).iterdir() if d.is_dir())


def test_task_killed_mid_wait_then_the_same_run_again_reattaches(airflow_env: AirflowEnv, tmp_path: Path,
                                                                  record_figure):
    run_name = "acc-reattach"
    conf = {"checkpointing": {"run_name": run_name, "steps": 30, "checkpoint_period": 10, "local_checkpoint_period": 2},
            "workload": {"extra_flags": {"step_time_ms": 150}, "max_restarts": 1}, "stall_timeout": 600,
            "fault_plan": []}
    dag_file = REPO / "dags" / "mtc_resilient_training.py"
    api = LocalCluster(str(airflow_env.local_home.root))
    events_dir = airflow_env.local_home.root / "buckets" / "mtc-checkpoints" / run_name / "events"

    def live_step() -> tuple[str, int] | None:
        for obj in api.list(NAMESPACE):
            name = obj["metadata"]["name"]
            steps = [p.get("step") or 0 for p in api.pods(NAMESPACE, name)]
            if not evaluate_jobset(obj).ended and steps and min(steps) >= 3:
                return name, min(steps)
        return None

    first = start_dag(airflow_env, dag_file, "mtc_resilient_training", conf, tmp_path / "first.log")
    try:
        name, step_at_kill = wait_for(live_step, 240, "a training JobSet at step 3")
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the task process (and the whole `dags test`) dies mid-wait
        first.wait()
    # Nothing deleted it: the JobSet outlives the task and keeps training.
    wait_for(lambda: (live_step() or ("", 0))[1] > step_at_kill, 60, "training to go on after the kill")

    second = start_dag(airflow_env, dag_file, "mtc_resilient_training", conf, tmp_path / "second.log")
    result = finish_dag(second, tmp_path / "second.log", 300)

    log = (tmp_path / "second.log").read_text()
    assert "success" in result["state"], log[-4000:]
    assert result["jobset"]["jobset_name"] == name and result["tries"]["train"] == 1, result
    # Exactly one JobSet ever existed for the attempt: one log folder, never restarted, and the workload
    # started once per process (a second JobSet, or a recreated one, would start it again).
    assert attempt_dirs(airflow_env, run_name) == [name] and name.endswith("-a1")
    assert restarts_of(airflow_env, name) == ["0"]
    events = read_events(events_dir)
    assert sorted(e["process"] for e in events if e["event"] == "start") == [0, 1]
    assert [e["step"] for e in events if e["event"] == "finish"] == [30, 30]
    assert api.list(NAMESPACE) == []  # the DAG's teardown removed it; checkpoints stay
    record_figure("reattach", {"jobset": name, "killed_at_step": step_at_kill, "tries_after_rerun": result["tries"]})


def test_hung_attempt_is_resubmitted_by_stall_detection_and_slow_attempts_are_not(airflow_env: AirflowEnv,
                                                                                   tmp_path: Path, record_figure):
    sys.path.insert(0, str(HERE / "dags"))
    try:
        import acceptance_stall as dag_module
    finally:
        sys.path.remove(str(HERE / "dags"))
    stall, poll = dag_module.STALL_TIMEOUT, dag_module.POLL_INTERVAL
    run_name = dag_module.RUN_NAME
    bucket = airflow_env.local_home.root / "buckets"
    api = LocalCluster(str(airflow_env.local_home.root))

    proc = start_dag(airflow_env, HERE / "dags" / "acceptance_stall.py", "mtc_acceptance_stall", {},
                     tmp_path / "stall.log")
    try:
        (hang,) = wait_for(lambda: api.run_faults(NAMESPACE, run_name), 240, "the hang fault to fire")
        # Fail fast (not at the DAG run's timeout) when nothing resubmits the hung attempt.
        wait_for(lambda: len(attempt_dirs(airflow_env, run_name)) > 1, stall + poll + 60,
                 f"a resubmission after the hang (stall_timeout {stall}s, poll_interval {poll}s): the launch "
                 "trigger did not flag the stalled attempt")
    except AssertionError:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    result = finish_dag(proc, tmp_path / "stall.log", 300)
    log = (tmp_path / "stall.log").read_text()
    assert "success" in result["state"], log[-4000:]

    # Two attempts: the hung one, deleted by the operator after the trigger's stall verdict, and the resubmission,
    # in the same try: the hung attempt had made progress before it hung (no Airflow retry spent on it).
    assert result["tries"]["train"] == 1, result
    first, second = attempt_dirs(airflow_env, run_name)
    assert first.endswith("-a1") and second.endswith("-a2")
    assert "stalled: no new finalized checkpoint" in log
    # The trigger ended the hung attempt, not the workload's watchdog: no in-cluster restart, no watchdog exit.
    assert restarts_of(airflow_env, first) == ["0"] and restarts_of(airflow_env, second) == ["0"]
    events = read_events(bucket / run_name / "events")
    assert not [e for e in events if e["event"] == "error" and e.get("reason") == "watchdog"]

    assert len(api.run_faults(NAMESPACE, run_name)) == 1  # the hang fires once per training run
    assert read_json(airflow_env.local_home.pods_file(NAMESPACE, first)) is None  # deleted by the operator
    second_created = read_json(airflow_env.local_home.pods_file(NAMESPACE, second))["created"]
    commits = [c for c in LocalCheckpointStore().finalized_steps(str(bucket / run_name / "checkpoints"))
               if c.commit_time <= hang["ts"]]
    last_commit = commits[-1].commit_time
    latency = second_created - hang["ts"]
    since_checkpoint = second_created - last_commit
    # Never before stall_timeout without progress; within stall_timeout + one poll interval of the hang, plus
    # the deletion of the hung JobSet (SIGTERM to a SIGSTOPped process: the whole 10 s grace, then SIGKILL) and the
    # next attempt's submission in the same try (the worker's resume, the deletion's wait). The bound was widened
    # to + 40 when the verdict came up to ~20 s late: the leader's log, read every pod_logs_interval (30 s), counted
    # its step lines as progress at the read although the events had shown the same step (issue 32 (a), fixed:
    # tests/triggers/test_stall_clock_start.py); a step now counts from when it happened, once. Seen after the fix
    # (2026-12-02, load 10-12): verdict 46 s after the last step with stall_timeout 45, resubmitted 49.1 s after
    # the hang.
    assert since_checkpoint > stall, (since_checkpoint, stall)
    assert latency <= stall + poll + 10 + 20, (latency, stall, poll)

    # Slow but progressing: the first attempt ran longer than stall_timeout (from its creation, when the stall
    # clock starts) before the hang without being flagged, and the resubmission ran to the end unflagged.
    first_created = (airflow_env.local_home.log_dir(NAMESPACE, first) / "0").stat().st_mtime
    assert hang["ts"] - first_created > stall, (hang["ts"] - first_created, stall)
    finish = [e["ts"] for e in events if e["event"] == "finish"]
    assert [e["step"] for e in events if e["event"] == "finish"] == [dag_module.STEPS] * 2
    record_figure("stall", {"stall_timeout": stall, "poll_interval": poll, "hang_step": hang.get("step"),
                     "resubmitted_after_hang_s": round(latency, 1),
                     "resubmitted_after_last_checkpoint_s": round(since_checkpoint, 1),
                     "first_attempt_before_hang_s": round(hang["ts"] - first_created, 1),
                     "second_attempt_s": round(max(finish) - second_created, 1)})
