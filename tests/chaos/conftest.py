"""Fixtures of the chaos suite: a fresh Airflow home (SQLite) and local-target home per run, cleaned up after."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def chaos_homes():
    """(env for the airflow CLI, Airflow home, local-target home). Afterwards: every JobSet deleted, the runner's
    supervisor stopped by its pid, its tmpfs tree removed, the scratch directory deleted."""
    from mtc_local.cluster.client import LocalCluster
    from mtc_local.shared.state import Home, read_json

    scratch = Path(tempfile.mkdtemp(prefix="mtc-chaos-"))
    airflow_home, local_home = scratch / "airflow", scratch / "local"
    airflow_home.mkdir()
    local_home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        AIRFLOW_HOME=str(airflow_home),
        AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        # The launch task defers: in `dags test` its trigger runs in the task's process, and a killed
        # deferred try is re-run by clearing (a RUNNING one would stay RESTARTING with no scheduler to reap it).
        AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE="True",
        MTC_LOCAL_HOME=str(local_home),
        MTC_RUNNER_IDLE_SECONDS="3",  # the supervisor leaves soon after the last JobSet: the stray check can wait
        MTC_GCS_IDLE_SECONDS="3",  # so does the home's local GCS, started on demand by checkpoint sensing
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    migrate = subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], env=env,
                             capture_output=True, text=True, timeout=180)
    assert migrate.returncode == 0, migrate.stdout[-3000:] + migrate.stderr[-3000:]
    home = Home.of(local_home)
    try:
        yield env, airflow_home, local_home
    finally:
        api = LocalCluster(str(local_home))
        for obj in api.list("default"):
            with contextlib.suppress(Exception):
                api.delete("default", obj["metadata"]["name"], timeout=60)
        info = read_json(home.supervisor_file)
        if info:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(info["pid"]), signal.SIGTERM)
        shutil.rmtree(home.shm_root, ignore_errors=True)
        if not os.environ.get("MTC_CHAOS_KEEP"):
            shutil.rmtree(scratch, ignore_errors=True)
