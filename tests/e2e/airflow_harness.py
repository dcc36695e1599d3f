"""A real Airflow (api-server, scheduler, dag-processor, triggerer) on 127.0.0.1 for the browser test.

Each component is its own process in its own session, started and stopped by PID. The scheduler and
triggerer run with --skip-serve-logs: their log servers would listen on every interface, and the
api-server reads task logs from the shared AIRFLOW_HOME anyway. Teardown sends SIGINT, waits, then
looks for anything still carrying this AIRFLOW_HOME in its environment (task processes, the local
runner's detached supervisor and its pods): survivors are killed by PID and the test errors.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import psutil
import pytest
import requests

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "ui"


def doc_images() -> Path:
    """Where the suite writes the screenshots the docs show: `MTC_DOCS_IMAGES` (e.g. docs/images, to refresh the
    docs on purpose), else a folder in the temp directory: a test run never rewrites the checkout's images."""
    import tempfile

    folder = Path(os.environ.get("MTC_DOCS_IMAGES") or Path(tempfile.gettempdir()) / "mtc-docs-images")
    folder.mkdir(parents=True, exist_ok=True)
    return folder
COMPONENTS = {
    "api-server": lambda port: ["api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
    "scheduler": lambda port: ["scheduler", "--skip-serve-logs"],
    "dag-processor": lambda port: ["dag-processor"],
    "triggerer": lambda port: ["triggerer", "--skip-serve-logs"],
}
START_TIMEOUT = 180.0
STOP_TIMEOUT = 45.0
LOCAL_EXECUTOR_WORKER_TITLE = "airflow worker -- LocalExecutor"  # local_executor._get_executor_process_title_prefix
RUNNER_IDLE_SECONDS = 5  # the local runner's supervisor exits by itself this long after its last JobSet


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(what: str, check: Callable[[], Any], timeout: float, interval: float = 2.0,
             alive: Callable[[], None] | None = None) -> Any:
    """Poll `check` until it returns something truthy; `alive` raises early when a component died."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        if alive:
            alive()
        try:
            last = check()
        except requests.RequestException as exc:
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}; last seen: {last!r}")


@dataclass
class AirflowServer:
    home: Path
    local_home: Path
    port: int
    env: dict[str, str]
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    username: str = "admin"
    password: str = ""
    stop_timeout: float = STOP_TIMEOUT
    idle_grace: float = RUNNER_IDLE_SECONDS * 3
    second_signal_timeout: float = 15.0
    signalled_twice: list[str] = field(default_factory=list)
    wedged_workers: list[str] = field(default_factory=list)
    _token: str = ""

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_path(self, name: str) -> Path:
        return self.home / "component-logs" / f"{name}.log"

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.log_path(name)
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                pytest.fail(f"airflow {name} exited with {proc.returncode}:\n{self.log_tail(name)}")

    # --- REST ---------------------------------------------------------------------------------------
    def token(self) -> str:
        if not self._token:
            resp = requests.post(f"{self.base_url}/auth/token", json={"username": self.username,
                                                                     "password": self.password}, timeout=30)
            resp.raise_for_status()
            self._token = resp.json()["access_token"]
        return self._token

    def api(self, method: str, path: str, expect: tuple[int, ...] = (200,), **kwargs: Any) -> Any:
        resp = requests.request(method, f"{self.base_url}/api/v2{path}",
                                headers={"Authorization": f"Bearer {self.token()}"}, timeout=60, **kwargs)
        if resp.status_code not in expect:
            raise AssertionError(f"{method} {path} -> {resp.status_code}: {resp.text[:2000]}")
        return resp.json() if resp.content else None

    def wait_for_dag(self, dag_id: str, timeout: float = 180.0) -> dict[str, Any]:
        """The DAG once parsed; fails at once with the import error when its file does not load."""
        def parsed() -> Any:
            errors = self.api("GET", "/importErrors")["import_errors"]
            if errors:
                pytest.fail("DAG import errors:\n" + "\n".join(f"{e['filename']}:\n{e['stack_trace']}"
                                                               for e in errors))
            resp = requests.get(f"{self.base_url}/api/v2/dags/{dag_id}",
                                headers={"Authorization": f"Bearer {self.token()}"}, timeout=30)
            return resp.json() if resp.status_code == 200 else None

        return wait_for(f"DAG {dag_id} to be parsed", parsed, timeout, alive=self.check_alive)

    def unpause(self, dag_id: str) -> None:
        self.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False})

    def trigger(self, dag_id: str, conf: dict[str, Any]) -> str:
        run = self.api("POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf})
        return run["dag_run_id"]

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float) -> dict[str, Any]:
        def ended() -> Any:
            run = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")
            return run if run["state"] in ("success", "failed") else None

        return wait_for(f"run {dag_id}/{run_id} to end", ended, timeout, interval=5.0, alive=self.check_alive)

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int) -> str:
        """The try's log as text lines (the API answers JSON: structured log records)."""
        data = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
                        params={"full_content": "true"})
        lines = []
        for record in data.get("content") or []:
            if isinstance(record, dict):
                text = f"{record.get('level', '')} {record.get('event', '')}"
                for detail in record.get("error_detail") or []:
                    text += f"\n  {detail.get('exc_type')}: {detail.get('exc_value')}"
                lines.append(text)
            else:
                lines.append(str(record))
        return "\n".join(lines)

    def failure_report(self, dag_id: str, run_id: str) -> str:
        """Every task's state and the log of each failed try: what a failed run assertion prints."""
        lines = []
        tis = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]
        for ti in tis:
            lines.append(f"{ti['task_id']}: {ti['state']} (try {ti['try_number']})")
            tries = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{ti['task_id']}/tries")
            for attempt in tries["task_instances"]:
                if attempt["try_number"] and attempt["state"] in ("failed", "up_for_retry", "up_for_reschedule"):
                    log = self.task_log(dag_id, run_id, ti["task_id"], attempt["try_number"])
                    lines.append(f"--- {ti['task_id']} try {attempt['try_number']} ({attempt['state']}):\n"
                                 + "\n".join(log.splitlines()[-60:]))
        return "\n".join(lines)

    # --- processes ----------------------------------------------------------------------------------
    def start(self) -> None:
        (self.home / "component-logs").mkdir(parents=True, exist_ok=True)
        migrate = subprocess.run([self.airflow, "db", "migrate"], env=self.env, capture_output=True, text=True,
                                 timeout=240)
        if migrate.returncode:
            pytest.fail(f"airflow db migrate failed:\n{migrate.stdout[-3000:]}\n{migrate.stderr[-3000:]}")
        for name, args in COMPONENTS.items():
            with open(self.log_path(name), "ab") as log:
                # A session of its own: SIGINT is not ignored (as it is for background jobs of a
                # non-interactive shell) and the whole group can be signalled by the leader's PID.
                self.procs[name] = subprocess.Popen(
                    [self.airflow, *args(self.port)], env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, start_new_session=True,
                    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                )
        wait_for("the api-server to answer", self._health_all_ok, START_TIMEOUT, alive=self.check_alive)
        password_file = self.home / "simple_auth_manager_passwords.json.generated"
        self.password = json.loads(password_file.read_text())[self.username]

    def _health_all_ok(self) -> bool:
        health = requests.get(f"{self.base_url}/api/v2/monitor/health", timeout=10).json()
        return all((health.get(part) or {}).get("status") == "healthy"
                   for part in ("metadatabase", "scheduler", "triggerer", "dag_processor"))

    @property
    def airflow(self) -> str:
        return str(Path(sys.executable).parent / "airflow")

    def ours(self) -> list[psutil.Process]:
        """Every live process started for this server: the components' trees and anything with our home."""
        found: dict[int, psutil.Process] = {}
        for proc in self.procs.values():
            try:
                parent = psutil.Process(proc.pid)
                for p in [parent, *parent.children(recursive=True)]:
                    found[p.pid] = p
            except psutil.NoSuchProcess:
                pass
        for p in psutil.process_iter():
            try:
                if p.pid != os.getpid() and p.environ().get("AIRFLOW_HOME") == str(self.home):
                    found[p.pid] = p
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass
        alive = []
        for p in found.values():
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.NoSuchProcess:
                pass
        return alive

    def stop(self) -> list[str]:
        """SIGINT every component's group, wait, then kill stragglers by PID; returns what had to be killed."""
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGINT)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + self.stop_timeout
        self._wait_components(deadline)
        # A scheduler whose LocalExecutor.end() waits on a wedged worker never exits on the first signal
        # (apache/airflow#67870, fixed after 3.3.2 by #67881); Airflow's own answer is a second one ("Signal
        # again if you don't want to wait", local_executor.py): what an operator does before reaching for kill.
        self.signalled_twice = []
        for name, proc in self.procs.items():
            if proc.poll() is None:
                self.signalled_twice.append(f"{proc.pid} {name}")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGINT)
        if self.signalled_twice:
            deadline = time.monotonic() + self.second_signal_timeout
            self._wait_components(deadline)
        # A worker wedged at its exit (its result pipe full, apache/airflow#67870) ignores SIGINT, a SIGTERM is a
        # no-op in a forked child (the scheduler's handler returns there), and the scheduler's atexit joins it
        # again after the second signal. Airflow's fix (#67881, after 3.3.2) kills such workers in
        # LocalExecutor.terminate(): the harness does the same by PID and tells, then gives the scheduler its time.
        self.wedged_workers = self._kill_wedged_executor_workers()
        if self.wedged_workers:
            deadline = time.monotonic() + self.second_signal_timeout
            self._wait_components(deadline)
        # The local runner's supervisor is detached on purpose and exits once idle: give it that time.
        survivors = self.ours()
        while survivors and time.monotonic() < deadline + self.idle_grace:
            time.sleep(1)
            survivors = self.ours()
        killed = []
        for p in survivors:
            try:
                killed.append(f"{p.pid} {' '.join(p.cmdline())[:200]}")
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(survivors, timeout=10)
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.wait(timeout=10)
        return killed

    def _kill_wedged_executor_workers(self) -> list[str]:
        killed = []
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                continue
            with contextlib.suppress(psutil.NoSuchProcess):
                for child in psutil.Process(proc.pid).children():
                    with contextlib.suppress(psutil.NoSuchProcess):
                        if " ".join(child.cmdline()).startswith(LOCAL_EXECUTOR_WORKER_TITLE):
                            killed.append(f"{child.pid} {' '.join(child.cmdline())[:120].rstrip()} (of {name})")
                            child.kill()
        return killed

    def _wait_components(self, deadline: float) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))


def server_env(home: Path, local_home: Path, port: int, dags_folder: Path, extra: dict[str, str]) -> dict[str, str]:
    """A clean environment: nothing from the test session's own Airflow settings (unit-test mode, home)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__AUTH_MANAGER":
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        # Every component must sign and check the same tokens.
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
        "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
        "AIRFLOW__SCHEDULER__STANDALONE_DAG_PROCESSOR": "True",
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
        "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
        "AIRFLOW__TRIGGERER__CAPACITY": "50",
        "MTC_LOCAL_HOME": str(local_home),
        "MTC_RUNNER_IDLE_SECONDS": str(RUNNER_IDLE_SECONDS),
        "MTC_GCS_IDLE_SECONDS": str(RUNNER_IDLE_SECONDS),  # the home's local GCS, started on demand, leaves too
        "PYTHONUNBUFFERED": "1",
    })
    env.update(extra)
    return env


# What the session's one Airflow (conftest.airflow_server) carries for each module that uses it.
UI_RUN_NAME = "e2e"  # test_ui.py's run; dags/mtc_checkpoint_evaluation.py follows its checkpoints
# test_preload_executor.py's probe DAG, test_next_in_trigger.py's DAG (one pool slot, taken while train waits) and
# test_defer_race.py's (a deferring process that ends after its resumed try started)
PRELOAD_DAGS = Path(__file__).resolve().parent / "preload_dags"


def session_env(dags_folder: Path) -> dict[str, str]:
    """The e2e session's Airflow: the sample DAGs and the preload probe as two DAG bundles, Airflow's LocalExecutor
    (the default: the first listed, so its workers fork before the preload) beside the provider's
    PreloadLocalExecutor (test_preload_executor.py), and the evaluation DAG following test_ui.py's run."""
    bundle = "airflow.dag_processing.bundles.local.LocalDagBundle"
    return {
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps([
            {"name": "dags-folder", "classpath": bundle, "kwargs": {"path": str(dags_folder)}},
            {"name": "e2e-preload-probe", "classpath": bundle, "kwargs": {"path": str(PRELOAD_DAGS)}}]),
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor,mtc_provider.executors.local.PreloadLocalExecutor",
        "MTC_EVAL_RUN_NAME": UI_RUN_NAME,
    }

BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync"]
CHROMIUM = "/usr/bin/chromium"
