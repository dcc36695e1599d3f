"""Test-wide set-up: an isolated Airflow home on the embedded SQLite database, and the shared reference files."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_REFERENCE = REPO.parent / "shared" / "reference"

# Airflow reads its configuration at import: set the home before any test imports it.
_AIRFLOW_HOME = Path(os.environ.get("MTC_TEST_AIRFLOW_HOME") or tempfile.mkdtemp(prefix="mtc-airflow-home-"))
os.environ.setdefault("AIRFLOW_HOME", str(_AIRFLOW_HOME))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(REPO / "dags"))


def reference_file(name: str) -> Path:
    """A file from ../shared/reference; fail with a clear message when the folder is absent."""
    path = SHARED_REFERENCE / name
    if not path.exists():
        pytest.fail(
            f"reference file {path} is absent: these tests need ../shared/reference beside the repository "
            "(the CRD schemas and the guide are not copied into the project)"
        )
    return path


@pytest.fixture(scope="session")
def airflow_db():
    """A migrated Airflow metadata database (SQLite) for tests that run DAGs with dag.test()."""
    from airflow.utils import db

    db.resetdb()
    return os.environ["AIRFLOW_HOME"]
