"""Fixtures for the acceptance tests (issues 4 and 5): real JAX/Orbax processes on the local target.

Every runner home lives under one session directory and is registered; after every test nothing may run
whose command line mentions that directory, and no home may have a tmpfs tree left under /dev/shm.
The expensive runs (a fault-free reference, a faulted emergency run, a persistent-only baseline) run once
per session and are shared by the tests that read them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import psutil
import pytest

from benchmarks.common import local_jobset, wait_terminal
from mtc_local.faults.report import FaultOutcome, fault_outcomes
from mtc_provider.core.definition.description.spec import CheckpointingSpec
from mtc_local.cluster.client import LocalCluster
from mtc_local.shared.state import Home, read_json
from mtc_provider.adapters.workload_events import events_dir, read_events

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "default"
SEED = 7
STEPS = 45
L = 2  # local_checkpoint_period
P = 10  # checkpoint_period
# Small and quick on 2 shared cores; step_time_ms stands in for accelerator time.
WORKLOAD_FLAGS = {"seed": SEED, "model_dim": 128, "global_batch_size": 16, "step_time_ms": 100}
SIGKILL_AT = 17  # slice 0 (replica 0 writes persistent only): the local copy on slice 1 survives
WIPE_AT = 27  # slice 1 holds the only local copies: the restore must come from the persistent tier
# A preemption with autocheckpoint. JAX's SIGTERM notifier took ~1 s (9 steps here) to reach the preemption
# sync point: a SIGTERM in the last steps is absorbed by the run finishing, so leave room before STEPS.
SIGTERM_AT = 32
FAULTS = [
    {"kind": "sigkill_host", "at_step": SIGKILL_AT, "slice": 0, "host": 0},
    {"kind": "wipe_ramdisk", "at_step": WIPE_AT, "slice": 1, "host": 0},
    {"kind": "sigterm_slice", "at_step": SIGTERM_AT, "slice": 1},
]
RUN_TIMEOUT = 240.0


# ---- process and tmpfs hygiene ------------------------------------------------------------------------
def processes_mentioning(text: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and any(text in part for part in proc.info["cmdline"] or []):
                found.append(proc)
        except psutil.Error:
            pass
    return found


def stop_pid(pid: int, timeout: float = 15.0) -> None:
    """SIGTERM one process we started (the supervisor then SIGKILLs its pods), SIGKILL if it lingers."""
    try:
        proc = psutil.Process(pid)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout)
    except psutil.NoSuchProcess:
        pass
    except psutil.TimeoutExpired:
        proc.kill()


@dataclass
class Homes:
    """Every runner home of this session, under one root directory."""

    root: Path
    homes: list[Home] = field(default_factory=list)

    def new(self, name: str) -> Home:
        home = Home.of(self.root / name / "home")
        self.homes.append(home)
        return home

    def leftovers(self) -> tuple[list[psutil.Process], list[Path]]:
        """Live processes naming the root, and ramdisks left on tmpfs (a JobSet's tree: <shm>/<ns>/<name>).

        The runner removes a deleted JobSet's tree but keeps the empty `<shm>/<ns>/` skeleton; that holds no
        memory and is not counted (the fixture removes it)."""
        ramdisks = [d for h in self.homes if h.shm_root.exists() for d in h.shm_root.glob("*/*")]
        return processes_mentioning(str(self.root)), ramdisks


@pytest.fixture(scope="session")
def homes(tmp_path_factory: pytest.TempPathFactory) -> Homes:
    return Homes(tmp_path_factory.mktemp("acceptance"))


@pytest.fixture(autouse=True)
def nothing_left_behind(homes: Homes) -> Iterator[None]:
    """After every test: no process mentions the session's directory, no tmpfs tree of its homes remains."""
    yield
    deadline = time.monotonic() + 10
    while any(homes.leftovers()) and time.monotonic() < deadline:
        time.sleep(0.2)
    procs, shm = homes.leftovers()
    described = [(p.pid, " ".join(p.cmdline())[:160]) for p in procs if p.is_running()]
    for proc in procs:  # clean up for the next test, then fail this one
        with contextlib.suppress(psutil.Error):
            proc.kill()
    for home in homes.homes:
        shutil.rmtree(home.shm_root, ignore_errors=True)
    assert not described, f"processes left running: {described}"
    assert not shm, f"tmpfs directories left: {shm}"


@contextlib.contextmanager
def runner(home: Home) -> Iterator[LocalCluster]:
    """A local runner on `home`; afterwards every JobSet is deleted, the supervisor stopped by its pid and the
    home's local GCS stopped."""
    api = LocalCluster(str(home.root))
    try:
        yield api
    finally:
        stop_runner(home)


def stop_runner(home: Home) -> None:
    api = LocalCluster(str(home.root))
    if home.state_dir.exists():
        for obj in api.list(NAMESPACE):
            with contextlib.suppress(Exception):
                api.delete(NAMESPACE, obj["metadata"]["name"], timeout=60)
    info = read_json(home.supervisor_file)
    if info:
        stop_pid(int(info["pid"]))
    from mtc_local import gcs

    gcs.stop(home.root)  # the home's local GCS, started on demand by checkpoint sensing


# ---- one training run through the runner (no Airflow) ------------------------------------------------
@dataclass
class TrainingRun:
    run_name: str
    bucket: Path
    attempts: list[dict[str, Any]]
    events: list[dict[str, Any]]
    faults: list[dict[str, Any]]
    wall_s: float

    @property
    def checkpoint_dir(self) -> Path:
        return self.bucket / self.run_name / "checkpoints"

    @property
    def finish(self) -> dict[str, Any] | None:
        return next((e for e in reversed(self.events) if e["event"] == "finish"), None)

    @property
    def sha256(self) -> str | None:
        return (self.finish or {}).get("params_sha256")

    def outcomes(self) -> dict[str, FaultOutcome]:
        return {o.kind: o for o in fault_outcomes(self.faults, self.events)}


def train(home: Home, run_name: str, emergency: bool, faults: list[dict[str, Any]] | None = None,
          max_attempts: int = 4) -> TrainingRun:
    """Train `run_name` to STEPS: a JobSet per attempt; an attempt that ends Completed below the target (a
    preemption: the workload saves and exits 0) is resubmitted at once, as the launch operator's retry does.
    Faults fire once per training run (the runner keys them on the run-name label)."""
    bucket = home.root.parent / "bucket"
    spec = CheckpointingSpec(
        run_name, str(bucket), STEPS,
        enable_emergency_checkpoint=emergency,
        local_checkpoint_directory="/local" if emergency else "",
        local_checkpoint_period=L if emergency else 0,
        checkpoint_period=P,
        enable_autocheckpoint=True,
    )
    attempts = []
    started = time.time()
    with runner(home) as api:
        for attempt in range(1, max_attempts + 1):
            name = f"{run_name}-a{attempt}"
            api.create(NAMESPACE, local_jobset(name, spec, WORKLOAD_FLAGS, faults, max_restarts=4, grace_seconds=15))
            obj = wait_terminal(api, name, RUN_TIMEOUT)
            attempts.append({"jobset": name, "terminalState": obj["status"]["terminalState"],
                             "restarts": obj["status"]["restarts"]})
            api.delete(NAMESPACE, name)  # ended attempts free their slices; checkpoints stay in the bucket
            events = read_events(events_dir(str(bucket), run_name))
            if any(e["event"] == "finish" for e in events) or obj["status"]["terminalState"] != "Completed":
                break
        run_faults = api.run_faults(NAMESPACE, run_name)
    run = TrainingRun(run_name, bucket, attempts, read_events(events_dir(str(bucket), run_name)), run_faults,
                      time.time() - started)
    restores = [e for e in run.events if e["event"] == "restore"]
    record(run_name, {"wall_s": round(run.wall_s, 1), "attempts": attempts,
                      "restores": [(e["step"], e["tier"], e.get("duration_s")) for e in restores if e["process"] == 0],
                      "faults": [{k: v for k, v in o.to_dict().items() if k != "ts"} for o in run.outcomes().values()],
                      "sha256": (run.sha256 or "")[:16]})
    return run


@pytest.fixture(scope="session")
def reference_run(homes: Homes) -> TrainingRun:
    """Fault-free, emergency checkpointing on: the parameters every other run must end with."""
    return train(homes.new("reference"), "acc-reference", emergency=True)


@pytest.fixture(scope="session")
def faulted_run(homes: Homes) -> TrainingRun:
    """Emergency checkpointing with a SIGKILL, a ramdisk wipe and a SIGTERM preemption."""
    return train(homes.new("faulted"), "acc-faulted", emergency=True, faults=FAULTS)


@pytest.fixture(scope="session")
def baseline_run(homes: Homes) -> TrainingRun:
    """Persistent-only checkpointing with the same SIGKILL."""
    return train(homes.new("baseline"), "acc-baseline", emergency=False, faults=FAULTS[:1])


# ---- Airflow in a subprocess ----------------------------------------------------------------------------
@dataclass
class AirflowEnv:
    """An isolated Airflow home (SQLite, migrated once) and local-target home for DAG runs in subprocesses."""

    airflow_home: Path
    local_home: Home

    def env(self, dags_folder: Path) -> dict[str, str]:
        venv_bin = str(Path(sys.executable).parent)
        return {
            **os.environ,
            "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
            "AIRFLOW_HOME": str(self.airflow_home),
            "MTC_LOCAL_HOME": str(self.local_home.root),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "MTC_RUNNER_IDLE_SECONDS": "20",
            "MTC_GCS_IDLE_SECONDS": "20",
            "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        }


@pytest.fixture(scope="session")
def migrated_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`airflow db migrate` once; each test copies the database file (a fresh, isolated metadata DB)."""
    template = tmp_path_factory.mktemp("airflow-template")
    env = {**os.environ, "AIRFLOW_HOME": str(template), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__UNIT_TEST_MODE": "False"}
    done = subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], env=env,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return template / "airflow.db"


@pytest.fixture
def airflow_env(homes: Homes, migrated_db: Path, request: pytest.FixtureRequest) -> Iterator[AirflowEnv]:
    name = request.node.name.replace("[", "-").replace("]", "")
    local_home = homes.new(name)
    airflow_home = local_home.root.parent / "airflow"
    airflow_home.mkdir(parents=True)
    shutil.copy(migrated_db, airflow_home / "airflow.db")
    yield AirflowEnv(airflow_home, local_home)
    stop_runner(local_home)


# ---- measured figures, printed at the end of the session (tests/conftest.py collects them) ------------------
# A figure goes on the report of the test that made it or whose session fixture made it (the training runs):
# pytest-xdist carries reports, not this module's state, from its worker to the controller that prints the summary.
_PENDING: dict[str, Any] = {}


def record(key: str, value: Any) -> None:
    """Keep a measured figure (steps lost, tiers, restore and detection times) for the session's summary."""
    _PENDING[key] = value


@pytest.fixture
def record_figure():
    """`record` of this conftest as pytest loaded it (a test importing the module gets a second copy)."""
    return record


@pytest.fixture(autouse=True)
def _figures_on_the_report(request: pytest.FixtureRequest) -> Iterator[None]:
    from tests.conftest import FIGURE_PROPERTY

    yield
    while _PENDING:
        request.node.user_properties.append((FIGURE_PROPERTY, _PENDING.popitem()))
