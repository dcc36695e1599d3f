"""`mtc run` against the Airflow REST API double (tests/doubles/airflow_api.py): a paused DAG is refused (nothing
triggered) unless --unpause, which unpauses it; --wait shows the run's state and ends with the shared exit codes
(0 success, 1 failed, 3 timed out), also when the DAG is paused while its run is queued (issue 35 item 7)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mtc_provider.cli.app import app
from mtc_provider.cli.console import TIMED_OUT
from tests.doubles.airflow_api import AirflowApiDouble

DAG = "mtc_resilient_training"
DESCRIPTION = {"target": "local", "slices": {"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
               "sizing": {"parameters": 1e6}, "checkpointing": {"run_name": "paused-test", "steps": 10}}


@pytest.fixture
def file(tmp_path: Path) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(DESCRIPTION))
    return path


def mtc_run(api: AirflowApiDouble, file: Path, *args: str):
    return CliRunner().invoke(app, ["run", str(file), "--api-url", api.url, "--username", "admin",
                                    "--password", "secret", "--poll", "0.01", *args])


def test_a_paused_dag_is_refused_and_nothing_is_triggered(file: Path) -> None:
    with AirflowApiDouble({DAG: True}) as api:
        result = mtc_run(api, file, "--wait")
        assert result.exit_code == 1, result.output
        assert f"DAG '{DAG}' is paused" in result.output and "--unpause" in result.output
        assert api.runs == {} and api.paused[DAG] is True


def test_unpause_unpauses_then_triggers_and_waits_to_success(file: Path) -> None:
    with AirflowApiDouble({DAG: True}) as api:
        result = mtc_run(api, file, "--unpause", "--wait")
        assert result.exit_code == 0, result.output
        assert api.paused[DAG] is False
        assert f"unpaused DAG {DAG}" in result.output
        ((_, run_id), run), = api.runs.items()
        assert run["state"] == "success" and f"run {run_id} ended: success" in result.output
        assert f"waiting: run {run_id} running" in result.output  # the progress, one line per state off a terminal
        assert run["conf"]["checkpointing"]["run_name"] == "paused-test"


def test_a_failed_run_exits_1(file: Path) -> None:
    with AirflowApiDouble({DAG: False}, final_state="failed") as api:
        result = mtc_run(api, file, "--wait")
        assert result.exit_code == 1 and "ended: failed" in result.output, result.output


def test_the_wait_times_out_with_the_shared_code(file: Path) -> None:
    with AirflowApiDouble({DAG: False}, reads_to_end=10**9) as api:
        result = mtc_run(api, file, "--wait", "--timeout", "0.2")
        assert result.exit_code == TIMED_OUT == 3, result.output
        assert "timed out: run manual__1" in result.output and "still running" in result.output


def test_a_dag_paused_while_its_run_is_queued_ends_the_wait(file: Path) -> None:
    with AirflowApiDouble({DAG: False}) as api:
        real_trigger = api.route

        def pause_on_trigger(method, path, query, body):
            answer = real_trigger(method, path, query, body)
            if method == "POST" and path.endswith("/dagRuns"):
                api.paused[DAG] = True  # someone pauses it right after the trigger
            return answer

        api.route = pause_on_trigger
        result = mtc_run(api, file, "--wait")
        assert result.exit_code == 1, result.output
        assert "was paused while run manual__1 was queued" in result.output
        assert api.runs[(DAG, "manual__1")]["state"] == "queued"


def test_an_unknown_dag_names_the_option(file: Path) -> None:
    with AirflowApiDouble({DAG: False}) as api:
        result = mtc_run(api, file, "--dag-id", "nope")
        assert result.exit_code == 1 and "--dag-id: no DAG 'nope'" in result.output, result.output
        assert api.runs == {}
