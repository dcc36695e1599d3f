"""A deployment's identity in the run lock is unique without configuration: generated once, stored in the
deployment's own metadata database (the Airflow Variable `mtc_deployment_id`), so every component of one deployment
reads the same id and two deployments (two copies of one compose file: the same Execution API URL, no
`[mtc] deployment_id`) differ, and neither takes the other's live lock over.

Each component is its own process on a real Airflow metadata database (SQLite files, migrated by Airflow itself);
deployment B's database starts as a copy of A's freshly migrated one, as a second copy of one set-up would.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from mtc_provider.adapters.run_lock import LockHeld, RunLock
from mtc_provider.core.basics import labels as L
from tests.doubles.memory_jobset import MemoryJobSetApi, MemoryJobSetCluster

SAME_URL = "http://airflow-apiserver:8080/execution/"  # what every copy of the compose file sets
PRINT_ID = "from mtc_provider.adapters.deployment import current_deployment; print(current_deployment())"


FERNET_KEYS: dict[str, str] = {}  # one per deployment, shared by its components (as Airflow requires)


def _run(db: str, *args: str) -> subprocess.CompletedProcess:
    from cryptography.fernet import Fernet

    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__MTC__")}
    env.update(AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{db}", AIRFLOW__CORE__EXECUTION_API_SERVER_URL=SAME_URL,
               AIRFLOW__CORE__FERNET_KEY=FERNET_KEYS.setdefault(db, Fernet.generate_key().decode()))
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=300)


def _component(db: str) -> str:
    """One Airflow component of the deployment whose metadata database is `db`: the id it records."""
    done = _run(db, "-c", PRINT_ID)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def two_deployments(tmp_path_factory):
    root = tmp_path_factory.mktemp("deployments")
    a, b = str(root / "a.db"), str(root / "b.db")
    migrated = _run(a, "-m", "airflow", "db", "migrate")
    assert migrated.returncode == 0, migrated.stderr[-2000:]
    shutil.copyfile(a, b)  # a second copy of the same fresh set-up
    FERNET_KEYS[b] = FERNET_KEYS[a]
    return a, b


@pytest.mark.slow
def test_one_deployment_one_id_two_deployments_two_and_no_take_over(two_deployments):
    a, b = two_deployments
    scheduler_a, worker_a = _component(a), _component(a)
    worker_b = _component(b)
    assert scheduler_a == worker_a  # generated once, then read by every component
    assert worker_b != worker_a and SAME_URL not in (worker_a, worker_b)
    assert worker_a.startswith("airflow-") and worker_b.startswith("airflow-")

    # B's launch finds A's live lock on the same checkpoint directory: refused, whatever B's Airflow says of the
    # owner (it has no row for A's task instance, which its owner check would call gone).
    api = MemoryJobSetApi(MemoryJobSetCluster())
    holder = L.run_labels("train_dag", "scheduled__2026-03-01T00:00:00+00:00", "train", "llama")
    owner = {"dag_id": "train_dag", "run_id": "scheduled__2026-03-01T00:00:00+00:00", "task_id": "train",
             "map_index": -1, "try_number": 1}
    RunLock(api, "ml", "llama", holder, owner, deployment=worker_a).acquire()
    with pytest.raises(LockHeld, match=f"another Airflow deployment \\({worker_a}; this one is {worker_b}\\)"):
        RunLock(api, "ml", "llama", holder, owner, deployment=worker_b).acquire(owner_gone=lambda o: (True, "gone"))


def test_a_configured_id_wins_over_the_stored_one(monkeypatch):
    from mtc_provider.adapters.deployment import current_deployment

    monkeypatch.setenv("AIRFLOW__MTC__DEPLOYMENT_ID", "team-a-prod")
    assert current_deployment() == "team-a-prod"


def test_the_first_writer_wins_a_race(monkeypatch):
    """Two components that both found no id end up with the one stored last-read, never with their own guesses."""
    from mtc_provider.adapters import deployment

    store: dict[str, str] = {}
    writes = iter(["airflow-racer"])  # another component writes between this one's write and its read-back

    def put(key, value):
        store[key] = value
        store[key] = next(writes, value)

    monkeypatch.setattr(deployment, "_variables", lambda: (store.get, put))
    assert deployment.stored_deployment() == "airflow-racer"
    assert deployment.stored_deployment() == "airflow-racer"  # read, not generated again
