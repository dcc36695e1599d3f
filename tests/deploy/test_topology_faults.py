"""The deployed shape, with its parts killed: docker-compose.yaml's services as processes (scripts/airflow_topology.py:
PostgreSQL, CeleryExecutor on Redis, two schedulers, two triggerers, a Celery worker, dag-processor, api-server,
the local target's supervisor) run the resilient training DAG on the local target while its components are
SIGKILLed (the fault-free reference trains straight on the local target meanwhile, same form, same JobSet):

- the Celery worker (its whole process tree, as when its container dies) while `train`'s first try runs in it,
  before it defers (the synchronous part: start-up, rendering, the JobSet listing and submission); it is started
  again, as `restart: always` does. Try 1 is then failed by the task heartbeat timeout and try 2 resubmits or
  reattaches. (Between the JobSet's submission and the deferral there are only milliseconds: a kill aimed
  there by polling lands after the deferral was sent, and the try is just resumed.)
- the triggerer that holds `train`'s deferred launch trigger: the other triggerer must take the trigger over;
- one scheduler: the other goes on scheduling the run.

It passes when the run succeeds, every JobSet ever created belongs to exactly one try and no two of the run were
live at once (none duplicated), the final parameters equal the reference's bit for bit, and no process is left.
Heartbeat timeouts are shortened (TIMINGS) so the detections take seconds, not Airflow's default minutes.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest

from benchmarks.common import local_runner, wait_terminal
from mtc_local.cluster.client import LocalCluster
from mtc_provider.adapters.workload_events import read_events
from scripts.airflow_topology import REPO, Topology, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

DAG_ID = "mtc_resilient_training"
NAMESPACE = "default"
# Airflow's detection delays, shortened (defaults: 300 s task heartbeat timeout, 30 s triggerer and scheduler
# health thresholds, 300 s orphaned-task adoption), and two settings for a small, busy machine.
TIMINGS = {
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "15",
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
    "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
    "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "10",
    "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "10",
    "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
    "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10",
    "AIRFLOW__CELERY__WORKER_CONCURRENCY": "4",  # 16 forked pool processes by default: too many for 2 cores
    "AIRFLOW__CORE__PARALLELISM": "4",  # the worker's slots, split by airflow-init's pools: 3 general, 1 launch
    "MTC_LAUNCH_SLOTS": "1",
    # Sending a task to Redis may take over the default 1 s on a loaded 2-core machine: the scheduler then marks
    # the task failed while the worker still runs it ("TI was not in a state where it could be marked as running").
    "AIRFLOW__CELERY__OPERATION_TIMEOUT": "15",
}
CONF = {"checkpointing": {"steps": 40, "checkpoint_period": 10, "local_checkpoint_period": 2},
        "workload": {"max_restarts": 1, "extra_flags": {"step_time_ms": 250}}, "stall_timeout": 300, "fault_plan": []}


def conf_for(run_name: str) -> dict:
    return {**CONF, "checkpointing": {**CONF["checkpointing"], "run_name": run_name}}
RUN_TIMEOUT = 420.0


@dataclass
class JobSetWatch:
    """Every JobSet of a run name seen by polling the local target: uid per name, most live at once."""

    api: LocalCluster
    run_name: str
    uids: dict[str, set[str]] = field(default_factory=dict)
    most_live: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def poll(self) -> None:
        while not self.stop.is_set():
            live = 0
            for obj in self.api.list(NAMESPACE, f"mtc.airflow.apache.org/run-name={self.run_name}") or []:
                meta = obj["metadata"]
                self.uids.setdefault(meta["name"], set()).add(meta["uid"])
                status = obj.get("status") or {}
                live += not status.get("terminalState") and not meta.get("deletionTimestamp")
            self.most_live = max(self.most_live, live)
            self.stop.wait(0.2)


@pytest.fixture(scope="module")
def reference_sha() -> Iterator[Any]:
    """The fault-free run, straight on the local target: the JobSet the launch operator submits for the same
    form (the DAG's defaults + CONF), built by the same functions. It trains while the topology starts."""
    from airflow.dag_processing.dagbag import DagBag

    from mtc_provider.core.definition.render.jobset_manifest import build_jobset
    from mtc_provider.core.definition.description.params import form_with_conf, training_run
    from mtc_provider.core.definition.description.spec import CheckpointingSpec, WorkloadSpec
    from mtc_provider.core.definition.shape.tpu import SliceSpec

    dag = DagBag(dag_folder=str(REPO / "dags" / f"{DAG_ID}.py")).dags[DAG_ID]
    params = form_with_conf(dag.params.dump(), conf_for("topo-reference"))
    with local_runner("topology-reference") as (api, _):
        plan = training_run(params, str(api.home.root))
        workload = WorkloadSpec(**{**plan["workload"], "command": tuple(plan["workload"]["command"])})
        body = build_jobset(SliceSpec(**plan["slices"]), CheckpointingSpec(**plan["checkpointing"]), workload, {})
        api.create(NAMESPACE, body)

        def sha() -> set[str]:
            obj = wait_terminal(api, body["metadata"]["name"], RUN_TIMEOUT)
            assert obj["status"]["terminalState"] == "Completed", obj["status"]
            checkpoints = Path(plan["checkpointing"]["base_output_directory"]) / "topo-reference"
            return {e["params_sha256"] for e in read_events(checkpoints / "events") if e["event"] == "finish"}

        yield sha


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    topo = Topology(tmp_path_factory.mktemp("topology"), extra_env=TIMINGS)
    try:
        topo.start()
        wait_until(f"DAG {DAG_ID} parsed", lambda: _dag_parsed(topo), 180, interval=2, alive=topo.check_alive)
        topo.api("PATCH", f"/dags/{DAG_ID}", json={"is_paused": False})
        yield topo
    finally:
        killed = topo.stop()
        topo.drop()
        assert not killed, f"processes still running after the topology stopped (killed by PID): {killed}"
        assert not topo.leftovers()


def _dag_parsed(topo: Topology) -> bool:
    try:
        return bool(topo.api("GET", f"/dags/{DAG_ID}"))
    except RuntimeError:
        return False


def _trigger(topo: Topology, run_name: str) -> str:
    return topo.api("POST", f"/dags/{DAG_ID}/dagRuns", json={"logical_date": None,
                                                             "conf": conf_for(run_name)})["dag_run_id"]


def _run_state(topo: Topology, run_id: str) -> str:
    return topo.sql("SELECT state FROM dag_run WHERE dag_id = %s AND run_id = %s", (DAG_ID, run_id))[0][0]


def _wait_run(topo: Topology, run_id: str) -> str:
    def ended() -> str | None:
        state = _run_state(topo, run_id)
        return state if state in ("success", "failed") else None

    return wait_until(f"run {run_id} to end", ended, RUN_TIMEOUT, interval=2, alive=topo.check_alive)


def _train(topo: Topology, run_id: str) -> tuple[str | None, int, int | None]:
    rows = topo.sql("SELECT state, try_number, trigger_id FROM task_instance WHERE dag_id = %s AND run_id = %s "
                    "AND task_id = 'train'", (DAG_ID, run_id))
    return rows[0] if rows else (None, 0, None)


def _params_sha(topo: Topology, run_name: str) -> set[str]:
    events = read_events(topo.places.local_home / "buckets" / "mtc-checkpoints" / run_name / "events")
    return {e["params_sha256"] for e in events if e["event"] == "finish"}


def _jobset_dirs(topo: Topology, run_name: str) -> list[str]:
    """Every JobSet the local target ever ran for the run: its log folder stays after deletion."""
    logs = topo.places.local_home / "logs" / NAMESPACE
    return sorted(d.name for d in logs.iterdir() if d.name.startswith(run_name + "-")) if logs.exists() else []


def _failure_report(topo: Topology, run_id: str) -> str:
    rows = topo.sql("SELECT task_id, state, try_number FROM task_instance WHERE dag_id = %s AND run_id = %s",
                    (DAG_ID, run_id))
    tails = "\n".join(f"--- {n}\n{topo.log_tail(n, 15)}" for n in topo.procs)
    return f"{rows}\n{tails}"


# ---- the faults ---------------------------------------------------------------------------------------------
def kill_worker_in_sync_part(topo: Topology, run_id: str, run_name: str) -> dict[str, Any]:
    """SIGKILL the worker's tree while `train`'s first try runs in it (before it defers)."""
    def running() -> bool:
        if _run_state(topo, run_id) == "failed":
            pytest.fail(f"the run failed before train ran: {_failure_report(topo, run_id)}")
        return _train(topo, run_id)[0] == "running"

    wait_until("train running", running, 240, interval=0.02, alive=topo.check_alive)
    pids = topo.kill("airflow-worker-1")
    state, try_number, _ = _train(topo, run_id)
    submitted = bool(list((topo.places.local_home / "state" / NAMESPACE).glob(f"{run_name}-*-a1.json")))
    return {"train_state_at_kill": state, "try": try_number, "killed_pids": len(pids), "jobset_a1": submitted}


def kill_triggerer_holding_train(topo: Topology, run_id: str) -> dict[str, Any]:
    def holder() -> tuple[int, str] | None:
        state, _, trigger_id = _train(topo, run_id)
        if state != "deferred" or trigger_id is None:
            return None
        rows = topo.sql("SELECT j.hostname FROM trigger t JOIN job j ON j.id = t.triggerer_id WHERE t.id = %s",
                        (trigger_id,))
        return (trigger_id, rows[0][0]) if rows else None

    trigger_id, host = wait_until("train's trigger to be held by a triggerer", holder, 240, interval=0.2,
                                  alive=topo.check_alive)
    assert re.fullmatch(r"airflow-triggerer-[12]", host), host
    topo.kill(host)
    other = "airflow-triggerer-2" if host.endswith("1") else "airflow-triggerer-1"

    def taken_over() -> str | None:
        rows = topo.sql("SELECT j.hostname FROM trigger t JOIN job j ON j.id = t.triggerer_id WHERE t.id = %s",
                        (trigger_id,))
        if rows and rows[0][0] == other:
            return rows[0][0]
        started = f"(ID {trigger_id}) starting" in topo.log_path(other).read_text(errors="replace")
        return other if started else None

    new_host = wait_until(f"{other} to take trigger {trigger_id} over", taken_over, 120, interval=0.2)
    return {"trigger_id": trigger_id, "killed": host, "taken_over_by": new_host}


# ---- the test ---------------------------------------------------------------------------------------------------
def test_training_survives_worker_triggerer_and_scheduler_kills(reference_sha, topology: Topology, record_property):
    topo = topology

    run_name = "topo-faults"
    watch = JobSetWatch(LocalCluster(str(topo.places.local_home)), run_name)
    poller = threading.Thread(target=watch.poll, daemon=True)
    poller.start()
    run_id = _trigger(topo, run_name)
    started = time.monotonic()
    try:
        worker = kill_worker_in_sync_part(topo, run_id, run_name)
        time.sleep(1)  # restart: always
        topo.restart("airflow-worker-1")
        worker["at_s"] = round(time.monotonic() - started, 1)
        triggerer = kill_triggerer_holding_train(topo, run_id)
        triggerer["at_s"] = round(time.monotonic() - started, 1)
        topo.kill("airflow-scheduler-1")
        (scheduler_killed_at,) = topo.sql("SELECT now()")[0]
        state = _wait_run(topo, run_id)
    finally:
        watch.stop.set()
        poller.join(10)
    assert state == "success", _failure_report(topo, run_id)
    figures = {"worker": worker, "triggerer": triggerer, "run_s": round(time.monotonic() - started, 1),
               "jobsets": _jobset_dirs(topo, run_name), "train_tries": _train(topo, run_id)[1]}
    record_property("topology_faults", figures)
    print(figures)

    # The worker died in the synchronous part: try 1 was failed by the heartbeat timeout and retried.
    _, tries, _ = _train(topo, run_id)
    assert worker["train_state_at_kill"] == "running" and worker["try"] == 1 and tries >= 2, (worker, tries)
    # Every JobSet ever created for the run: one per try that submitted, never recreated, never two live.
    names = _jobset_dirs(topo, run_name)
    assert names and len(names) <= tries, (names, tries)
    attempts = [int(re.search(r"-a(\d+)$", n).group(1)) for n in names]
    assert len(set(attempts)) == len(attempts), names
    assert all(len(uids) == 1 for uids in watch.uids.values()), watch.uids
    assert set(watch.uids) <= set(names)
    assert watch.most_live == 1, watch.most_live
    # After one scheduler's death the other queued the rest of the run (checkpoint_progress, goodput, teardown).
    queued_after = topo.sql(
        "SELECT ti.task_id, j.hostname FROM task_instance ti JOIN job j ON j.id = ti.queued_by_job_id "
        "WHERE ti.dag_id = %s AND ti.run_id = %s AND ti.queued_dttm > %s", (DAG_ID, run_id, scheduler_killed_at))
    assert {"goodput", "teardown"} <= {task for task, _ in queued_after}, queued_after
    assert {host for _, host in queued_after} == {"airflow-scheduler-2"}, queued_after
    # docker-compose.yaml's pools (airflow-init): every try of train in the launch pool, the rest in default_pool,
    # together exactly the worker's slots, so a retry never waits behind general tasks.
    pools = dict(topo.sql("SELECT pool, slots FROM slot_pool"))
    assert pools["mtc_launch"] == 1 and pools["default_pool"] == 3, pools
    used = topo.sql("SELECT DISTINCT task_id = 'train', pool FROM task_instance WHERE dag_id = %s AND run_id = %s",
                    (DAG_ID, run_id))
    assert set(used) == {(True, "mtc_launch"), (False, "default_pool")}, used
    # Bit for bit the parameters of the fault-free run.
    reference = reference_sha()
    assert len(reference) == 1, reference
    assert _params_sha(topo, run_name) == reference
