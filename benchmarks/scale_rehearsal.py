"""Benchmark 8: scale rehearsal. N concurrent runs of the resilient training DAG, each with one injected fault,
through the deployed topology and through a single-node SQLite Airflow, measured the same way:

- ``topology``: docker-compose.yaml's services as processes (scripts/airflow_topology.py): PostgreSQL, the
  CeleryExecutor on Redis, two schedulers, two triggerers, a Celery worker, dag-processor, api-server and the
  local target's supervisor;
- ``sqlite``: what `airflow standalone` runs (tests/e2e/airflow_harness.py): SQLite, the LocalExecutor, one
  scheduler, one triggerer, dag-processor, api-server.

Each run is the sample DAG `mtc_resilient_training` (its file, with `max_active_runs=1` raised to N: the only
change) on the local target with the light workload (`local_workload=light`: no JAX), `max_restarts=0` and a
SIGKILL of slice 0's host at FAULT_STEP, so its first JobSet fails and `train`'s retry submits the next one.
Measured over the window from the first trigger to the last run's end:

- resubmission: fault (the runner's record) -> try 1 of `train` ends (metadata DB) -> try 2 starts (metadata DB)
  -> next JobSet created (the runner's pods file, read by an observer while the JobSet lives); p50/p99;
- triggerer event-loop lag: the triggerer's own watchdog (`block_watchdog`: sleeps 0.1 s, logs "Triggerer's
  async thread was blocked for X seconds" above `[triggerer] blocked_main_thread_warning_threshold`, set to 0
  here so every 100 ms loop is logged); lag = X - 0.1 s;
- scheduler loop time: the scheduler's own "Ran scheduling loop in X ms" (DEBUG, enabled for that logger only
  with `[logging] namespace_levels`), the duration its `scheduler.scheduler_loop_duration` timer reports;
- metadata-database statements per run: every SQL statement any Airflow process sent (benchmarks/query_counter.py,
  the same count on both databases); for PostgreSQL also pg_stat_database's transactions and rows of our database.

Goals: every run succeeds (issue 14); resubmission p99 at most retry_delay + 30 s = 33 s (issues 28 and 34;
issue 14's 5 s assumed no worker-slot waits). The topology arm is docker-compose.yaml as shipped: one Celery worker
whose slots airflow-init's pools split between the launch tries and every other task (docs/deployment.md "Worker
slots on the resubmission path"); `topology_no_pools` is the same topology with Airflow's default pool for every
task, the comparison (ratio_topology_to_topology_no_pools). `--launch-concurrency N` adds a launch worker on a
Celery queue of its own.

    python -m benchmarks.scale_rehearsal --runs 50 [--arms topology,topology_no_pools,sqlite] [--quick]
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from benchmarks.common import NAMESPACE, REPO, argument_parser, print_table, ratio, result_path, write_result
from benchmarks.query_counter import LOCAL_SETTINGS
from benchmarks.query_counter import total as statements_so_far

NAME = "scale_rehearsal"
DAG_ID = "mtc_resilient_training"
DAG_FILE = REPO / "dags" / f"{DAG_ID}.py"
RETRY_DELAY_S = 3.0  # the sample DAG's train retry_delay
GOAL_P99_S = RETRY_DELAY_S + 30.0  # issue 28: fault to next JobSet p99 at most retry_delay + 30 s at 50 runs
FAULT_STEP = 8
WATCHDOG_SLEEP_S = 0.1  # block_watchdog's asyncio.sleep
SLOW_LOOP_S = 0.2  # the watchdog's default warning threshold: what Airflow would have reported
LAG_RE = re.compile(r"Triggerer's async thread was blocked for ([0-9.]+) seconds")
LOOP_RE = re.compile(r"Ran scheduling loop in ([0-9.]+) ms")
# Airflow's "task state changed externally" check failing a task on a stale executor event (apache/airflow#66374,
# #67287, #72716: the executor's success for a try that deferred, read after the try was queued again).
MISMATCH_RE = re.compile(r"reported that the task instance <TaskInstance: [^ ]+\.(\w+) ([^ ]+) .*?finished with "
                         r"state (\w+), but the task instance's state attribute is (\w+)")
# The scheduler's executor at `[core] parallelism` (airflow.executors.base_executor logs it): a queued task waits
# in the scheduler, not in its worker's queue (the hand-off that the deployment's parallelism setting removes).
PARALLELISM_FULL = "parallelism limit reached"
ATTEMPT_RE = re.compile(r"-a(\d+)$")

# The same Airflow settings on both arms, beyond each set-up's own.
COMMON_ENV = {
    "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "true",
    "AIRFLOW__TRIGGERER__BLOCKED_MAIN_THREAD_WARNING_THRESHOLD": "0",
    "AIRFLOW__LOGGING__NAMESPACE_LEVELS": "airflow.jobs.scheduler_job_runner=DEBUG",
    "AIRFLOW__TRIGGERER__CAPACITY": "500",
    "AIRFLOW__CORE__PARALLELISM": "4",
    "AIRFLOW__CELERY__WORKER_CONCURRENCY": "4",  # as parallelism: 16 pool processes are too many for 2 cores
    # Sending a task to Redis may take over the default 1 s on a loaded 2-core machine; the scheduler then fails
    # a task the worker runs (tests/deploy/test_topology_faults.py found it).
    "AIRFLOW__CELERY__OPERATION_TIMEOUT": "15",
}


# ---- pure parts: statistics, log lines, timestamps, legs ------------------------------------------------
def percentile(values: Sequence[float | None], q: float) -> float | None:
    """The q-th percentile (0-100), linear between closest ranks (numpy's default); None when empty."""
    kept = sorted(v for v in values if v is not None)
    if not kept:
        return None
    if not 0 <= q <= 100:
        raise ValueError(f"q must be within 0 and 100, got {q}")
    pos = (len(kept) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(kept) - 1)
    return kept[low] + (kept[high] - kept[low]) * (pos - low)


def distribution(values: Sequence[float | None], digits: int = 4) -> dict[str, Any]:
    kept = [v for v in values if v is not None]
    out: dict[str, Any] = {"n": len(kept)}
    for name, q in (("p50", 50), ("p90", 90), ("p99", 99), ("max", 100)):
        value = percentile(kept, q)
        out[name] = None if value is None else round(value, digits)
    return out


def triggerer_lags(text: str) -> list[float]:
    """Event-loop lag per watchdog loop (s): the reported blocked time minus the watchdog's own 0.1 s sleep."""
    return [max(0.0, float(m.group(1)) - WATCHDOG_SLEEP_S) for m in LAG_RE.finditer(text)]


def scheduler_loops(text: str) -> list[float]:
    """Scheduling loop durations (ms) from the scheduler's log."""
    return [float(m.group(1)) for m in LOOP_RE.finditer(text)]


def state_mismatches(text: str) -> list[dict[str, str]]:
    """Tasks the scheduler failed because an executor event disagreed with the task's state (its error line)."""
    return [{"task": m.group(1), "run": m.group(2), "executor_state": m.group(3), "ti_state": m.group(4)}
            for m in MISMATCH_RE.finditer(text)]


def epoch(value: Any) -> float | None:
    """A metadata-DB timestamp as unix seconds: a tz-aware datetime (PostgreSQL) or SQLite's UTC text."""
    if value is None:
        return None
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if value.tzinfo is None:  # Airflow stores UTC
        value = value.replace(tzinfo=dt.timezone.utc)
    return value.timestamp()


def legs(fault_ts: float | None, tries: dict[int, dict[str, Any]], created: dict[int, float]) -> dict[str, Any]:
    """One run's resubmission legs: fault -> try 1 ends -> try 2 starts -> JobSet of attempt 2 created (s)."""
    first_end = epoch((tries.get(1) or {}).get("end_date"))
    second_start = epoch((tries.get(2) or {}).get("start_date"))
    nxt = created.get(2)

    def span(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else round(b - a, 3)

    return {"fault_to_try1_end_s": span(fault_ts, first_end), "try1_end_to_try2_start_s": span(first_end, second_start),
            "try2_start_to_next_jobset_s": span(second_start, nxt), "fault_to_next_jobset_s": span(fault_ts, nxt)}


def run_conf(run_name: str, steps: int, step_time_ms: int) -> dict[str, Any]:
    # The run description's sections (core.definition.description.run), laid over the training DAG's form field by field.
    return {"checkpointing": {"run_name": run_name, "steps": steps, "checkpoint_period": 5, "local_checkpoint_period": 2},
            "workload": {"command": ["python", "-m", "mtc_local.light_workload"], "max_restarts": 0,
                         "extra_flags": {"step_time_ms": step_time_ms}},
            "stall_timeout": 600,
            "fault_plan": [{"kind": "sigkill_host", "at_step": FAULT_STEP, "slice": 0, "host": 0}]}


def dag_source(max_active_runs: int) -> str:
    """The sample DAG's file with max_active_runs raised (the only change); fails if the file changed shape."""
    text = DAG_FILE.read_text()
    if text.count("max_active_runs=1,") != 1:
        raise RuntimeError(f"{DAG_FILE} no longer sets max_active_runs=1 once: update the benchmark")
    return text.replace("max_active_runs=1,", f"max_active_runs={max_active_runs},")


# ---- what was created, seen while it lives ----------------------------------------------------------------
class JobSetObserver(threading.Thread):
    """Creation time of every JobSet (the runner's pods file `created`, written at creation), by attempt."""

    def __init__(self, local_home: Path) -> None:
        super().__init__(daemon=True)
        self.state_dir = local_home / "state" / NAMESPACE
        self.created: dict[str, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.5):
            self.scan()

    def scan(self) -> None:
        if not self.state_dir.is_dir():
            return
        for path in self.state_dir.glob("*.pods.json"):
            name = path.name[: -len(".pods.json")]
            if name in self.created:
                continue
            try:
                self.created[name] = float(json.loads(path.read_text())["created"])
            except (OSError, ValueError, KeyError):  # being written or already deleted
                continue

    def of_run(self, run_name: str) -> dict[int, float]:
        out = {}
        for name, ts in self.created.items():
            match = ATTEMPT_RE.search(name)
            if name.startswith(run_name[:40].rstrip("-") + "-") and match:
                out[int(match.group(1))] = ts
        return out


# ---- the two arms --------------------------------------------------------------------------------------------
@dataclass
class Arm:
    name: str
    scratch: Path
    queries_dir: Path = field(init=False)

    def __post_init__(self) -> None:
        self.queries_dir = self.scratch / "queries"
        self.dags = self.scratch / "dags"
        self.dags.mkdir(parents=True, exist_ok=True)

    def write_local_settings(self, airflow_home: Path) -> None:
        (airflow_home / "config").mkdir(parents=True, exist_ok=True)
        (airflow_home / "config" / "airflow_local_settings.py").write_text(
            LOCAL_SETTINGS.format(directory=str(self.queries_dir)))


LAUNCH_QUEUE = "mtc-launch"
LAUNCH_WORKER = "airflow-launch-worker"


class TopologyArm(Arm):
    """docker-compose.yaml as shipped: one Celery worker whose slots `airflow-init`'s pools split between the launch
    tries (`mtc_launch`, which the sample DAG's `train` uses) and every other task (`default_pool`)."""

    worker_slots = 6  # the general worker's Celery slots: 16 pool processes are too many for 2 cores
    launch_slots = 2  # the launch pool's share of them (MTC_LAUNCH_SLOTS)
    pools = True  # False: the comparison arm, Airflow's defaults (default_pool 128, train in it)
    launch_concurrency = 0  # >0: a second Celery worker on a launch queue of its own (docs/deployment.md)
    launch_preload = True  # the launch worker imports what every launch try needs before its pool forks
    # Each scheduler's executor queues at most `[core] parallelism` tasks (queued + running) over all queues. None:
    # the slots of every worker (docs/deployment.md's sizing rule).
    parallelism: int | None = None

    def start(self, runs: int) -> None:
        import dataclasses

        from scripts.airflow_topology import Topology

        (self.dags / f"{DAG_ID}.py").write_text(dag_source(runs))
        slots = self.worker_slots + self.launch_concurrency
        env = {**COMMON_ENV, "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(4 * runs),
               "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'provider'}",
               "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(self.worker_slots),
               "AIRFLOW__CORE__PARALLELISM": str(self.parallelism or slots),
               "MTC_LAUNCH_SLOTS": str(self.launch_slots)}
        if self.launch_concurrency:  # docs/deployment.md, "Worker slots on the resubmission path"
            env["MTC_LAUNCH_QUEUE"] = LAUNCH_QUEUE
        self.topo = Topology(self.scratch / "topology", dags_folder=self.dags, extra_env=env)
        self.write_local_settings(self.topo.places.airflow_home)
        self.topo.start()
        self.size_pools()
        if self.launch_concurrency:  # a second Celery worker, on the launch queue only, as the deployment page says
            worker = self.topo.services["airflow-worker"]
            environment = dict(worker.environment)
            if self.launch_preload:  # the launch tries inherit the imports (mtc_provider.celery_preload)
                environment["AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS"] = "mtc_provider.celery_preload.CELERY_CONFIG"
            self.topo.services[LAUNCH_WORKER] = dataclasses.replace(
                worker, name=LAUNCH_WORKER, environment=environment,
                command=["celery", "worker", "--queues", LAUNCH_QUEUE, "--concurrency", str(self.launch_concurrency),
                         "--celery-hostname", "launch@%h", "--skip-serve-logs"])
            self.topo.spawn(f"{LAUNCH_WORKER}-1")
        self.local_home = self.topo.places.local_home

    def size_pools(self) -> None:
        """airflow-init sized them for one shared worker. The comparison arm bounds neither: both at Airflow's
        default_pool size (128), as before the pools. A launch worker of its own gets the launch pool (its slots)
        beside the general worker's default_pool."""
        if not self.pools:
            for pool in ("default_pool", "mtc_launch"):
                self.patch_pool_slots(pool, 128)
        elif self.launch_concurrency:
            self.patch_pool_slots("default_pool", self.worker_slots)
            self.patch_pool_slots("mtc_launch", self.launch_concurrency)
        self.pool_slots = {p["name"]: p["slots"] for p in self.topo.api("GET", "/pools")["pools"]}

    def patch_pool_slots(self, pool: str, slots: int) -> None:
        """Only the pool's slots, as Airflow 3.3's PATCH /pools/{name} takes it: `update_mask=slots` (the default
        pool refuses a patch without it) and a body that validates as a whole pool (name and include_deferred too,
        for any other pool: services/public/pools.py)."""
        self.topo.api("PATCH", f"/pools/{pool}?update_mask=slots",
                      json={"name": pool, "slots": slots, "include_deferred": False})

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.topo.api(method, path, **kwargs)

    def sql(self, query: str, params: tuple = ()) -> list[tuple]:
        return self.topo.sql(query, params)

    def check_alive(self) -> None:
        self.topo.check_alive()

    def logs(self, kind: str) -> list[Path]:
        return [self.topo.log_path(n) for n in self.topo.procs if n.startswith(f"airflow-{kind}-")]

    def db_stats(self) -> dict[str, int]:
        rows = self.topo.sql("SELECT xact_commit, xact_rollback, tup_returned, tup_fetched, tup_inserted, "
                             "tup_updated, tup_deleted FROM pg_stat_database WHERE datname = current_database()")
        keys = ("xact_commit", "xact_rollback", "tup_returned", "tup_fetched", "tup_inserted", "tup_updated",
                "tup_deleted")
        return dict(zip(keys, (int(v) for v in rows[0])))

    def stop(self) -> list[str]:
        if not hasattr(self, "topo"):
            return []
        try:
            return self.topo.stop()
        finally:
            self.topo.drop()


class SqliteArm(Arm):
    def start(self, runs: int) -> None:
        sys.path.insert(0, str(REPO / "tests" / "e2e"))
        from airflow_harness import AirflowServer, free_port, server_env

        (self.dags / f"{DAG_ID}.py").write_text(dag_source(runs))
        home, self.local_home = self.scratch / "airflow", self.scratch / "local"
        home.mkdir(parents=True, exist_ok=True)
        self.local_home.mkdir(parents=True, exist_ok=True)
        self.write_local_settings(home)
        port = free_port()
        env = server_env(home, self.local_home, port, self.dags,
                         {**COMMON_ENV, "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(4 * runs),
                          "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'provider'}"})
        self.server = AirflowServer(home=home, local_home=self.local_home, port=port, env=env)
        self.server.start()
        self.db_path = home / "airflow.db"

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.server.api(method, path, **kwargs)

    def sql(self, query: str, params: tuple = ()) -> list[tuple]:
        conn = sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True, timeout=60)
        try:
            return conn.execute(query.replace("%s", "?"), params).fetchall()
        finally:
            conn.close()

    def check_alive(self) -> None:
        self.server.check_alive()

    def logs(self, kind: str) -> list[Path]:
        return [self.server.log_path(kind)]

    def db_stats(self) -> dict[str, int]:
        return {}

    def stop(self) -> list[str]:
        return self.server.stop() if hasattr(self, "server") else []


# ---- one arm's measurement -------------------------------------------------------------------------------------
def log_offsets(arm: Arm) -> dict[str, int]:
    return {str(p): p.stat().st_size if p.exists() else 0 for kind in ("triggerer", "scheduler") for p in arm.logs(kind)}


def log_window(arm: Arm, kind: str, start: dict[str, int], end: dict[str, int]) -> dict[str, str]:
    out = {}
    for path in arm.logs(kind):
        with open(path, "rb") as f:
            f.seek(start.get(str(path), 0))
            out[path.stem] = f.read(end[str(path)] - start.get(str(path), 0)).decode(errors="replace")
    return out


def wait_parsed(arm: Arm, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        arm.check_alive()
        try:
            if arm.api("GET", f"/dags/{DAG_ID}"):
                return
        except (RuntimeError, AssertionError):
            pass
        time.sleep(2)
    raise TimeoutError(f"DAG {DAG_ID} not parsed after {timeout:.0f}s")


def run_states(arm: Arm, prefix: str) -> dict[str, str]:
    rows = arm.sql("SELECT run_id, state FROM dag_run WHERE dag_id = %s AND run_id LIKE %s", (DAG_ID, prefix + "%"))
    return {run_id: state for run_id, state in rows}


def train_tries(arm: Arm, run_id: str) -> dict[int, dict[str, Any]]:
    cols = "try_number, state, start_date, end_date"
    rows = arm.sql(f"SELECT {cols} FROM task_instance_history WHERE dag_id = %s AND run_id = %s AND task_id = 'train' "
                   f"UNION ALL SELECT {cols} FROM task_instance WHERE dag_id = %s AND run_id = %s AND task_id = 'train'",
                   (DAG_ID, run_id, DAG_ID, run_id))
    return {int(t): {"state": s, "start_date": a, "end_date": b} for t, s, a, b in rows}


def unsuccessful_tasks(arm: Arm, run_id: str) -> list[list[Any]]:
    """Task instances of a run that did not succeed (task, state, try): why a run failed."""
    rows = arm.sql("SELECT task_id, state, try_number FROM task_instance WHERE dag_id = %s AND run_id = %s "
                   "AND (state IS NULL OR state != 'success')", (DAG_ID, run_id))
    return [list(r) for r in rows]


def measure(arm: Arm, runs: int, steps: int, step_time_ms: int, timeout: float, idle_s: float) -> dict[str, Any]:
    from mtc_local.cluster.client import LocalCluster

    started = time.time()
    arm.start(runs)
    wait_parsed(arm, 300)
    arm.api("PATCH", f"/dags/{DAG_ID}", json={"is_paused": False})
    observer = JobSetObserver(arm.local_home)
    observer.start()
    prefix = f"scale-{arm.name[:4]}-"
    names = [f"{prefix}{i}" for i in range(runs)]
    # The background rate (heartbeats, health checks, parsing) with nothing to run: what a run adds is above it.
    idle_from, idle_statements = time.time(), statements_so_far(arm.queries_dir)
    time.sleep(idle_s)
    idle_rate = (statements_so_far(arm.queries_dir) - idle_statements) / (time.time() - idle_from)
    offsets, statements, db_before = log_offsets(arm), statements_so_far(arm.queries_dir), arm.db_stats()
    window_start = time.time()
    for name in names:
        arm.api("POST", f"/dags/{DAG_ID}/dagRuns",
                json={"dag_run_id": name, "logical_date": None, "conf": run_conf(name, steps, step_time_ms)})
    states: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        arm.check_alive()
        states = run_states(arm, prefix)
        if len(states) == runs and all(s in ("success", "failed") for s in states.values()):
            break
        time.sleep(3)
    window_s = time.time() - window_start
    observer.scan()
    observer.stop.set()
    end_offsets, statements_after, db_after = log_offsets(arm), statements_so_far(arm.queries_dir), arm.db_stats()
    api = LocalCluster(str(arm.local_home))
    per_run = []
    for name in names:
        faults = api.run_faults(NAMESPACE, name)
        tries = train_tries(arm, name)
        created = observer.of_run(name)
        per_run.append({"run": name, "state": states.get(name), "train_tries": max(tries, default=0),
                        "not_successful": unsuccessful_tasks(arm, name) if states.get(name) != "success" else [],
                        "train_history": {t: [v["state"], str(v["start_date"]), str(v["end_date"])]
                                          for t, v in sorted(tries.items())},
                        "jobsets": sorted(created), "faults": len(faults),
                        **legs(float(faults[0]["ts"]) if faults else None, tries, created)})
    lags = {k: triggerer_lags(v) for k, v in log_window(arm, "triggerer", offsets, end_offsets).items()}
    scheduler_text = log_window(arm, "scheduler", offsets, end_offsets)
    loops = {k: scheduler_loops(v) for k, v in scheduler_text.items()}
    mismatches = [x for v in scheduler_text.values() for x in state_mismatches(v)]
    all_lags = [x for v in lags.values() for x in v]
    all_loops = [x for v in loops.values() for x in v]
    succeeded = sum(r["state"] == "success" for r in per_run)
    resubmitted = sum(2 in r["jobsets"] and r["faults"] >= 1 for r in per_run)
    db_delta = {k: db_after[k] - db_before[k] for k in db_after}
    return {
        "runs": runs, "succeeded": succeeded, "resubmitted": resubmitted, "window_s": round(window_s, 1),
        "all_succeeded": succeeded == runs and resubmitted == runs,
        "resubmission": {key: distribution([r[key] for r in per_run], 3) for key in
                         ("fault_to_next_jobset_s", "fault_to_try1_end_s", "try1_end_to_try2_start_s",
                          "try2_start_to_next_jobset_s")},
        "triggerer_lag_s": {**distribution(all_lags), "loops_over_0.2s": sum(x + WATCHDOG_SLEEP_S > SLOW_LOOP_S
                                                                               for x in all_lags),
                            "per_triggerer": {k: distribution(v) for k, v in lags.items()}},
        "scheduler_loop_ms": {**distribution(all_loops, 2), "loops_per_s": round(len(all_loops) / window_s, 2),
                              "per_scheduler": {k: distribution(v, 2) for k, v in loops.items()}},
        "db": {"statements": statements_after - statements, "statements_per_run": round(
            (statements_after - statements) / runs, 1), "statements_per_s": round(
            (statements_after - statements) / window_s, 1), "idle_statements_per_s": round(idle_rate, 1),
            "statements_per_run_above_idle": round((statements_after - statements - idle_rate * window_s) / runs, 1),
            **({"pg_stat_database": db_delta, "transactions_per_run": round(
                (db_delta["xact_commit"] + db_delta["xact_rollback"]) / runs, 1)} if db_delta else {})},
        "scheduler_parallelism_full": sum(v.count(PARALLELISM_FULL) for v in scheduler_text.values()),
        "state_mismatch_failures": {"n": len(mismatches), "by_task": {t: sum(x["task"] == t for x in mismatches)
                                                                       for t in sorted({x["task"] for x in mismatches})},
                                    "events": mismatches},
        "setup_s": round(window_start - started, 1), "per_run": per_run,
    }


def run_arm(arm: Arm, runs: int, steps: int, step_time_ms: int, timeout: float, idle_s: float) -> dict[str, Any]:
    """Measure one arm; every process it started is ended by PID and its database, keys and scratch removed."""
    killed: list[str] = []
    try:
        result = measure(arm, runs, steps, step_time_ms, timeout, idle_s)
    except Exception as exc:  # noqa: BLE001 - reported in the result, the other arm still runs
        result = {"runs": runs, "error": f"{type(exc).__name__}: {exc}"[:3000], "all_succeeded": False}
    finally:
        killed = arm.stop()
    result["killed_at_teardown"] = killed
    if getattr(arm, "pool_slots", None):
        result["pools"] = arm.pool_slots
    return result


class TopologyNoPoolsArm(TopologyArm):
    """The same topology with pools that bound nothing (128 slots each, Airflow's default_pool size): what
    docker-compose.yaml had before the pools."""

    pools = False


ARMS = {"topology": TopologyArm, "topology_no_pools": TopologyNoPoolsArm, "sqlite": SqliteArm}


def main() -> None:
    parser = argument_parser(__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50, help="concurrent DAG runs per arm")
    parser.add_argument("--arms", default="topology,sqlite", help="comma-separated: topology, topology_no_pools, sqlite")
    parser.add_argument("--steps", type=int, default=16, help="training steps per run")
    parser.add_argument("--step-time-ms", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=1500, help="seconds for all runs of one arm to end")
    parser.add_argument("--idle-s", type=float, default=20, help="seconds idle before the runs: background rate")
    parser.add_argument("--launch-concurrency", type=int, default=TopologyArm.launch_concurrency,
                        help=f"topology: slots of the Celery worker on the {LAUNCH_QUEUE!r} queue, which the sample "
                             "DAG's launch task is routed to (docs/deployment.md); 0: no launch queue")
    parser.add_argument("--no-launch-preload", action="store_true",
                        help="topology: the launch worker without mtc_provider.celery_preload (each try imports)")
    parser.add_argument("--parallelism", type=int, default=None,
                        help="topology: [core] parallelism of each scheduler (default: the general and the launch "
                             "workers' slots together; 4 is how it was measured before 2026-12-01)")
    parser.add_argument("--worker-slots", type=int, default=TopologyArm.worker_slots,
                        help="topology arms: the general Celery worker's slots (worker_concurrency)")
    parser.add_argument("--launch-slots", type=int, default=TopologyArm.launch_slots,
                        help="topology: the launch pool's share of the worker's slots (MTC_LAUNCH_SLOTS)")
    args = parser.parse_args()
    TopologyArm.worker_slots, TopologyArm.launch_slots = args.worker_slots, args.launch_slots
    TopologyArm.parallelism = args.parallelism
    TopologyArm.launch_concurrency = args.launch_concurrency
    TopologyArm.launch_preload = not args.no_launch_preload
    if args.quick:
        args.runs = min(args.runs, 3)
    arms = [a for a in args.arms.split(",") if a]
    for a in arms:
        if a not in ARMS:
            parser.error(f"--arms: {a!r} is not one of {', '.join(ARMS)}")
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    started = time.time()
    results = {}
    for name in arms:
        scratch = Path(tempfile.mkdtemp(prefix=f"mtc-bench-scale-{name}-"))
        try:
            results[name] = run_arm(ARMS[name](name, scratch), args.runs, args.steps, args.step_time_ms,
                                    args.timeout, args.idle_s)
        finally:
            if not os.environ.get("MTC_BENCH_KEEP"):
                shutil.rmtree(scratch, ignore_errors=True)
        results[name]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    summary = summarize(results)
    print_table(f"Scale rehearsal: {args.runs} concurrent runs, one fault each",
                ["arm", "ok", "resub p50 s", "resub p99 s", "trig lag p50 s", "trig lag p99 s",
                 "sched loop p50 ms", "sched loop p99 ms", "statements/run", "above idle"],
                [[n, f"{r.get('succeeded')}/{r['runs']}", *(r.get("resubmission", {}).get(
                    "fault_to_next_jobset_s", {}).get(k) for k in ("p50", "p99")),
                  *(r.get("triggerer_lag_s", {}).get(k) for k in ("p50", "p99")),
                  *(r.get("scheduler_loop_ms", {}).get(k) for k in ("p50", "p99")),
                  r.get("db", {}).get("statements_per_run"), r.get("db", {}).get("statements_per_run_above_idle")]
                 for n, r in results.items()])
    record = {"quick": args.quick, "parameters": {k: v for k, v in vars(args).items() if k != "output"},
              "conf": run_conf("<run>", args.steps, args.step_time_ms), "common_env": COMMON_ENV,
              "goal_resubmission_p99_s": GOAL_P99_S, "load_average_at_start": load_at_start,
              "wall_s": round(time.time() - started, 1), "summary": summary, "arms": results}
    path = write_result(result_path(NAME, args.quick, args.output), NAME, record)
    print(json.dumps(summary, indent=1))
    print(f"result: {path}")


def summarize(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Goals per arm, and topology / sqlite ratios of the headline figures."""
    out: dict[str, Any] = {}
    for name, r in results.items():
        p99 = r.get("resubmission", {}).get("fault_to_next_jobset_s", {}).get("p99")
        out[name] = {"every_run_succeeded": bool(r.get("all_succeeded")),
                     "resubmission_p99_s": p99, "resubmission_p99_goal_met": p99 is not None and p99 < GOAL_P99_S}
    figures = {"resubmission_p50": ("resubmission", "fault_to_next_jobset_s", "p50"),
               "resubmission_p99": ("resubmission", "fault_to_next_jobset_s", "p99"),
               "triggerer_lag_p99": ("triggerer_lag_s", "p99"), "scheduler_loop_p50": ("scheduler_loop_ms", "p50"),
               "scheduler_loop_p99": ("scheduler_loop_ms", "p99"), "statements_per_run": ("db", "statements_per_run"),
               "statements_per_run_above_idle": ("db", "statements_per_run_above_idle"),
               "scheduler_parallelism_full": ("scheduler_parallelism_full",), "window_s": ("window_s",)}

    def pick(r: dict[str, Any], *path: str) -> Any:
        for key in path:
            r = (r or {}).get(key)
        return r

    # The deployment against the single-node baseline, and the pools against the same topology without them.
    for arm, baseline in (("topology", "sqlite"), ("topology", "topology_no_pools")):
        if {arm, baseline} <= set(results):
            top, base = results[arm], results[baseline]
            out[f"ratio_{arm}_to_{baseline}"] = {k: _round(ratio(pick(top, *p), pick(base, *p)))
                                                 for k, p in figures.items()}
    return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


if __name__ == "__main__":
    main()
