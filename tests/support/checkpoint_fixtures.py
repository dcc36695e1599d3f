"""Fixtures for the checkpoint tests: Orbax writers in subprocesses, and a counting GCS emulator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.doubles.emulator import CountingEmulator

HERE = Path(__file__).resolve().parent  # orbax_writer.py sits beside this module

GCS_CONN_ID = "mtc_test_gcs"


def run_orbax(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run orbax_writer.py with JAX on CPU; the emulator's env is inherited when it is running."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "GOOGLE_CLOUD_PROJECT": "mtc-test"}
    return subprocess.run([sys.executable, str(HERE / "orbax_writer.py"), *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


def orbax_steps(directory: str) -> list[int]:
    result = run_orbax("--list", directory)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def gcs():
    """A running emulator with bucket `ckpt`, and an Airflow connection (anonymous) that GCSHook can use."""
    with CountingEmulator() as emulator:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        storage.Client(project="mtc-test", credentials=AnonymousCredentials()).create_bucket("ckpt")
        key = f"AIRFLOW_CONN_{GCS_CONN_ID.upper()}"
        os.environ[key] = json.dumps({"conn_type": "google_cloud_platform", "extra": {"is_anonymous": True}})
        try:
            yield emulator
        finally:
            os.environ.pop(key, None)
