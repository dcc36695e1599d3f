"""The suite's worker groups (tests/conftest.py): under `make test`'s 2 pytest-xdist workers, the tests of a folder
that shares one expensive session set-up (a real Airflow, trainings, the MaxText environment) stay on one worker."""

from __future__ import annotations

from types import SimpleNamespace

from tests.conftest import pytest_xdist_make_scheduler, shared_setup_group


class _AsLoadgroup:
    """This session's pytest config, as `-n 2 --dist loadgroup` would have set it."""

    def __init__(self, config) -> None:
        self._config = config

    def getvalue(self, name: str):
        return {"dist": "loadgroup", "tx": ["2*popen"]}.get(name) or self._config.getvalue(name)

    def __getattr__(self, name: str):
        return getattr(self._config, name)


def test_a_shared_setup_folder_is_one_scope_and_every_other_test_its_own(pytestconfig) -> None:
    scheduler = pytest_xdist_make_scheduler(_AsLoadgroup(pytestconfig), log=None)
    ui, cli = "tests/e2e/test_ui.py::test_run_view_during_the_run", "tests/e2e/test_cli_run.py::test_x[a@b]"
    assert scheduler._split_scope(ui) == scheduler._split_scope(cli) == "e2e"
    assert scheduler._split_scope("tests/acceptance/test_acceptance_faults.py::test_a") == "acceptance"
    core = "tests/core/test_tries.py::test_a"
    assert scheduler._split_scope(core) == core  # spread freely
    assert shared_setup_group("tests/e2e_extra/test_x.py::test_a") is None
    # Another distribution mode is pytest-xdist's own.
    other = SimpleNamespace(getvalue=lambda name: "load")
    assert pytest_xdist_make_scheduler(other, log=None) is None
