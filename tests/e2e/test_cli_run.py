"""`mtc run FILE --wait` against a real Airflow (api-server, scheduler, dag-processor, triggerer on 127.0.0.1; the
e2e harness's fixture) on the local target: the `mtc` process logs in with a username and password (a JWT from
`/auth/token`), triggers the training DAG with the file's description, prints the run's URL in the UI and waits for
the run to succeed. The run's conf in Airflow is the validated description, and the run trained to the file's steps.
Then the second half of a user's day with the same file: `mtc plan`, `mtc run` (no wait), `mtc logs --follow` of the
attempt while it trains, `mtc status --wait` until the run ends, `mtc list` and `mtc status` after the teardown.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest
import requests
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

TRAINING = "mtc_resilient_training"
REPO = Path(__file__).resolve().parents[2]
# The light workload (no JAX) keeps this test about the CLI and the API: the same DAG, the same run description.
DESCRIPTION = {
    "target": "local",
    "slices": {"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
    "sizing": {"parameters": 1e6},
    "checkpointing": {"run_name": "cli-run", "steps": 12, "enable_emergency_checkpoint": True,
                      "local_checkpoint_directory": "/local", "local_checkpoint_period": 2, "checkpoint_period": 4},
    "workload": {"command": ["python", "-m", "mtc_local.light_workload"],
                 "extra_flags": {"step_time_ms": 50}},
    "stall_timeout": 120,
}


def _mtc(args: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "mtc"), *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def test_mtc_run_triggers_the_training_dag_and_waits_for_its_end(airflow_server, tmp_path):
    server = airflow_server
    server.wait_for_dag(TRAINING)
    server.unpause(TRAINING)
    file = tmp_path / "run.yaml"
    file.write_text(yaml.safe_dump(DESCRIPTION, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW_API_URL=server.base_url, AIRFLOW_USERNAME=server.username, AIRFLOW_PASSWORD=server.password,
               MTC_LOCAL_HOME=str(server.local_home))

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**DESCRIPTION, "checkpointing": {**DESCRIPTION["checkpointing"],
                                                                    "checkpoint_period": 0}}))
    runs_before = server.api("GET", f"/dags/{TRAINING}/dagRuns")["total_entries"]  # the session's Airflow is shared
    refused = _mtc(["run", str(bad)], env, 60)
    assert refused.returncode == 2 and "checkpointing.checkpoint_period: 0 is not allowed" in refused.stderr
    assert server.api("GET", f"/dags/{TRAINING}/dagRuns")["total_entries"] == runs_before  # nothing was triggered

    done = _mtc(["run", str(file), "--wait", "--poll", "3", "--timeout", "600"], env, 700)
    report = f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    found = re.search(rf"{re.escape(server.base_url)}/dags/{TRAINING}/runs/(\S+)", done.stdout)
    assert found, report
    run_id = urllib.parse.unquote(found.group(1))
    if done.returncode != 0:
        pytest.fail(report + "\n" + server.failure_report(TRAINING, run_id))
    assert f"run {run_id} ended: success" in done.stdout, report

    run = server.api("GET", f"/dags/{TRAINING}/dagRuns/{run_id}")
    assert run["state"] == "success" and run["conf"]["checkpointing"]["run_name"] == "cli-run"
    assert run["conf"]["workload"]["command"] == DESCRIPTION["workload"]["command"]
    assert run["conf"]["checkpointing"]["base_output_directory"] is None  # the server's home decides it
    plan = server.api("GET", f"/dags/{TRAINING}/dagRuns/{run_id}/taskInstances/plan/xcomEntries/return_value",
                      params={"deserialize": "true"})["value"]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    assert plan["checkpoint_dir"] == f"{server.local_home}/buckets/mtc-checkpoints/cli-run/checkpoints"
    assert (plan["checkpointing"]["checkpoint_period"], plan["workload"]["max_restarts"]) == (4, 3)
    steps = sorted(int(p.name) for p in Path(plan["checkpoint_dir"]).iterdir() if p.name.isdigit())
    assert steps and steps[-1] == 12, steps  # trained to the file's steps (the light workload ends at N)
    page = requests.get(found.group(0), timeout=30)  # the printed URL is the UI's page for the run
    assert page.status_code == 200 and "<html" in page.text.lower()


def _logs_once_the_attempt_runs(env: dict[str, str], where: list[str], run_name: str, timeout: float = 180):
    """`mtc logs RUN --follow` as soon as the run's first attempt has a leader pod (the CLI says "no attempt"/"no
    leader pod (yet)" before that, exit 1)."""
    deadline = time.monotonic() + timeout
    while True:
        followed = _mtc(["logs", run_name, "--follow", "--poll", "0.5", *where], env, 300)
        if followed.returncode == 0 or time.monotonic() > deadline:
            return followed
        time.sleep(1.0)


def test_a_user_s_day_with_one_file_plan_run_logs_status_list(airflow_server, tmp_path):
    server = airflow_server
    server.wait_for_dag(TRAINING)
    server.unpause(TRAINING)
    run_name = "cli-day"
    # Steps of 300 ms: the attempt trains for about 12 s, long enough for `mtc logs --follow` to find it running
    # (a read never starts the local cluster, whose supervisor exits once idle after the run).
    description = {**DESCRIPTION, "checkpointing": {**DESCRIPTION["checkpointing"], "run_name": run_name,
                                                    "steps": 40}, "fault_plan": [],
                   "workload": {**DESCRIPTION["workload"], "extra_flags": {"step_time_ms": 300}}}
    file = tmp_path / "day.yaml"
    file.write_text(yaml.safe_dump(description, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW_API_URL=server.base_url, AIRFLOW_USERNAME=server.username, AIRFLOW_PASSWORD=server.password,
               MTC_LOCAL_HOME=str(server.local_home))
    where = ["--local-home", str(server.local_home)]

    planned = _mtc(["plan", str(file)], env, 120)
    assert planned.returncode == 0, planned.stderr
    started = _mtc(["run", str(file)], env, 120)
    assert started.returncode == 0, started.stderr
    found = re.search(rf"{re.escape(server.base_url)}/dags/{TRAINING}/runs/(\S+)", started.stdout)
    assert found, started.stdout
    run_id = urllib.parse.unquote(found.group(1))

    followed = _logs_once_the_attempt_runs(env, where, run_name)
    assert followed.returncode == 0, f"{followed.stdout[-2000:]}\n{followed.stderr[-2000:]}"
    steps = [int(line.split(":")[1].split(",")[0]) for line in followed.stdout.splitlines()
             if line.startswith("completed step:")]
    assert steps and steps[-1] == 40, followed.stdout[-2000:]  # followed to the attempt's end

    waited = _mtc(["status", run_name, "--wait", "--timeout", "300", *where, "-o", "json"], env, 400)
    if waited.returncode != 0:
        pytest.fail(f"{waited.stdout}\n{waited.stderr}\n" + server.failure_report(TRAINING, run_id))
    run = server.wait_for_run(TRAINING, run_id, timeout=300)  # the training's end; then the DAG's teardown
    assert run["state"] == "success", server.failure_report(TRAINING, run_id)

    status = _mtc(["status", run_name, *where, "-o", "json"], env, 120)  # after the teardown: the run's record
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    assert data["state"] == "succeeded" and data["newest_step"] == 40 and len(data["attempts"]) == 1, (
        json.dumps(data, indent=1) + "\n" + server.task_log(TRAINING, run_id, "train", 1))
    listed = _mtc(["list", *where, "-o", "json"], env, 120)
    assert listed.returncode == 0, listed.stderr
    (row,) = [r for r in json.loads(listed.stdout) if r["run_name"] == run_name]
    assert (row["state"], row["attempts"], row["step"]) == ("succeeded", 1, 40)
