"""The soak harness's readings (soak_harness.py), on planted logs and records: why a try ended comes from the
task log, else from the trigger's log beside it (Airflow 3's triggerer writes `attempt=N.log.trigger.<job>.log`,
airflow/jobs/triggerer_job_runner.py); each fault is reported with the gaps, restarts and unreached tries that
followed it."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from tests.deploy import soak_harness as H


def _topo(tmp_path: Path) -> SimpleNamespace:
    return SimpleNamespace(places=SimpleNamespace(airflow_home=tmp_path))


def _log(path: Path, *entries: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))


def test_why_a_try_ended_is_read_from_the_triggerers_log_when_the_task_log_is_silent(tmp_path: Path):
    folder = tmp_path / "logs" / f"dag_id={H.DAG_ID}" / "run_id=r" / "task_id=train"
    _log(folder / "attempt=1.log", {"level": "info", "event": "::group::Pre Execute"})
    _log(folder / "attempt=1.log.trigger.7.log", {"level": "info", "event": "watching"},
         {"level": "error", "event": "attempt soak-1 failed: FailedJobs"})
    _log(folder / "attempt=2.log", {"level": "error", "event": "Task failed", "logger": "mtc_provider.x"})
    reasons = H.try_reasons(_topo(tmp_path), "r", "train", 3)
    assert reasons[1] == "triggerer log: error: attempt soak-1 failed: FailedJobs"
    assert reasons[2] == "task log: error: Task failed"
    assert reasons[3].startswith("(no error in the task or triggerer log")
    assert not H.reached_provider(_topo(tmp_path), "r", 1) and H.reached_provider(_topo(tmp_path), "r", 2)


def test_each_fault_gets_the_gaps_restarts_and_unreached_tries_that_followed_it():
    origin = 1000.0
    injected = [{"kind": "database_outage", "at_s": 10.0, "took_s": 60.0},
                {"kind": "apiserver_kill", "at_s": 300.0, "took_s": 45.0}]
    gaps = [H.Gap(1015.0, 1100.0, ("deferred",), ("t1",)), H.Gap(1302.0, 1305.0, ("scheduled",), ())]
    restarts = [{"replica": "airflow-scheduler-1", "exited": 1, "at": 1020.0}]
    tries = [{"try": 1, "state": "up_for_retry", "start": 1290.0, "end": 1310.0},
             {"try": 2, "state": "success", "start": 1400.0, "end": 1500.0}]
    database, apiserver = H.effects(injected, gaps, restarts, tries, origin, reached=lambda n: n != 1)
    assert database["effect"] == {"supervision_gap_s": 85.0, "gaps": [{"at_s": 15.0, "seconds": 85.0,
                                                                       "cause": "triggerer"}],
                                  "restarted": ["airflow-scheduler-1 (exit 1)"],
                                  "tries_never_reaching_the_provider": []}
    assert apiserver["effect"]["tries_never_reaching_the_provider"] == [1]
    assert apiserver["effect"]["supervision_gap_s"] == 3.0
