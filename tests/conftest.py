"""Test-wide set-up: an isolated Airflow home on the embedded SQLite database, and the third-party test data."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
THIRD_PARTY = REPO / "tests" / "data" / "third_party"  # upstream CRDs, see its README.md for source and licence
# The CRDs the local API server validates against ship in the mtc-local wheel; the tests read those very files.
PACKAGE_CRDS = REPO / "rehearsal" / "mtc_local" / "cluster" / "crds"
THIRD_PARTY_DIRS = (THIRD_PARTY, PACKAGE_CRDS)
# The guide (prose, not copied into the project): present only on machines that keep it beside the repository.
GUIDE_REFERENCE = REPO.parent / "shared" / "reference"



def sample_dag(filename: str, module_name: str):
    """A sample DAG file of dags/ loaded as its own module (its DAG object is `.dag`), as the DAG processor parses it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(module_name, REPO / "dags" / filename)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Airflow reads its configuration at import: set the home before any test imports it.
_AIRFLOW_HOME = Path(os.environ.get("MTC_TEST_AIRFLOW_HOME") or tempfile.mkdtemp(prefix="mtc-airflow-home-"))
# pytest-xdist (`make test WORKERS=2`): each worker process has its own home, so its own SQLite metadata database
# (the workers inherit the controller's environment, AIRFLOW_HOME included, which they must not share).
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _WORKER:
    _AIRFLOW_HOME = _AIRFLOW_HOME.with_name(f"{_AIRFLOW_HOME.name}-{_WORKER}")
    _AIRFLOW_HOME.mkdir(parents=True, exist_ok=True)
    os.environ["AIRFLOW_HOME"] = str(_AIRFLOW_HOME)
os.environ.setdefault("AIRFLOW_HOME", str(_AIRFLOW_HOME))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(REPO / "dags"))


# Folders whose tests share session fixtures that start real processes (trainings, Airflow, the MaxText
# environment): under pytest-xdist (`make test`'s 2 workers) each folder runs on one worker, so each set-up is paid once.
SHARED_SETUP_FOLDERS = ("acceptance", "conformance", "e2e")


def shared_setup_group(nodeid: str) -> str | None:
    """The folder of SHARED_SETUP_FOLDERS a test id is in, else None."""
    parts = nodeid.split("::", 1)[0].split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" and parts[1] in SHARED_SETUP_FOLDERS else None


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`--dist loadgroup` with the groups taken from the test ids: one scope per shared-setup folder, every other test
    its own. pytest-xdist's own loadgroup appends an `xdist_group` marker's name to `item._nodeid`, which pytest 9.2
    no longer reads (`Node.nodeid` is built from `Node._id`): its groups silently vanish there and each folder's
    set-up would be paid on both workers (seen: two e2e Airflows, 2026-12-02)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FolderGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return shared_setup_group(nodeid) or nodeid

    return FolderGroups(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long rehearsals (the `soak` marker: the orchestrator-fault soak, the compressed week, the chaos schedule;
    about 22 minutes) run only when a marker expression names them (`make soak`: `-m soak`); `make test` and
    `make test-fast` leave them out, so the suite stays within its time budget."""
    if "soak" in (config.getoption("markexpr") or ""):
        return
    soak = [item for item in items if item.get_closest_marker("soak")]
    if soak:
        config.hook.pytest_deselected(items=soak)
        items[:] = [item for item in items if not item.get_closest_marker("soak")]


# Measured figures the acceptance tests keep (tests/acceptance/conftest.py `record_figure`), printed at the end of the
# session. They travel on the test reports' user_properties: under pytest-xdist (`make test`'s default) the tests run
# in worker processes and only the reports reach the controller, which prints the summary.
FIGURE_PROPERTY = "mtc_measured_figure"
_FIGURES: dict[str, object] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for name, value in report.user_properties:
        if name == FIGURE_PROPERTY:
            key, figure = value
            _FIGURES[key] = figure


def pytest_terminal_summary(terminalreporter) -> None:
    import json

    if _FIGURES:
        terminalreporter.section("acceptance: measured figures")
        for key, value in _FIGURES.items():
            terminalreporter.write_line(f"{key}: {json.dumps(value, default=str)}")


def reference_file(name: str) -> Path:
    """A third-party file kept in tests/data/third_party (part of the repository: missing means a broken checkout)."""
    path = next((folder / name for folder in THIRD_PARTY_DIRS if (folder / name).exists()), THIRD_PARTY / name)
    if not path.exists():
        pytest.fail(f"test data {path} is missing from the checkout (see tests/data/third_party/README.md)")
    return path


def guide_file(name: str) -> Path:
    """The guide itself, where it sits beside the repository; skip (saying why) where it does not."""
    path = GUIDE_REFERENCE / name
    if not path.exists():
        pytest.skip(f"the guide {path} is not beside this checkout: the comparison of tests/data/guide_facts.py "
                    "with the guide runs only where the guide is present")
    return path


@pytest.fixture(scope="session")
def airflow_db():
    """A migrated Airflow metadata database (SQLite) for tests that run DAGs with dag.test()."""
    from airflow.utils import db

    db.resetdb()
    return os.environ["AIRFLOW_HOME"]


@pytest.fixture(scope="session", autouse=True)
def stop_local_gcs_servers(tmp_path_factory):
    """Stop every local GCS a test started on demand in a temporary home (they would otherwise wait out their
    idle timeout after the session)."""
    yield
    from mtc_local.gcs import stop

    for server in Path(tmp_path_factory.getbasetemp()).glob("**/gcs/server.json"):
        stop(server.parent.parent)
