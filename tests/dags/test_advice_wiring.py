"""The training DAG's checkpoint advice in real Airflow (dag.test on SQLite): the goodput task reports it, a
task stores it as the Variable `mtc_advice.<run_name>`, and the next run's plan applies it when `apply_advice`
is on (and only then). Training itself is marked successful without running (dag.test's mark_success_pattern):
the goodput task reads events written here, as the local workload writes them."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from tests.support.training_dag import load_training_dag



@pytest.fixture
def training_dag(monkeypatch, tmp_path, airflow_db):
    return load_training_dag(monkeypatch, tmp_path, "mtc_training_dag_for_advice")


SKIPPED = r"^(readiness|train|checkpoint_progress|teardown)$"  # marked success, not run


def _xcom(run, task_id):
    return run.get_task_instance(task_id).xcom_pull(task_ids=task_id)


def test_advice_is_reported_stored_and_applied_only_when_asked(training_dag, tmp_path):
    from airflow.models.variable import Variable

    from tests.core.test_advisor import run_events

    conf = {"checkpointing": {"run_name": "advice-run", "local_checkpoint_period": 2, "checkpoint_period": 4,
                              "steps": 16}, "fault_plan": []}
    from mtc_provider.core.definition.description.params import form_with_conf, training_run

    first_day = dt.datetime(2026, 2, 1, tzinfo=dt.timezone.utc)
    # where the plan puts this run_name's events: write the earlier attempts there
    form = form_with_conf({key: param.value for key, param in training_dag.params.items()}, conf)
    events_dir = Path(training_run(form, str(tmp_path / "home"))["events_dir"])
    events_dir.mkdir(parents=True, exist_ok=True)
    events, _ = run_events()
    (events_dir / "process-0.jsonl").write_text("\n".join(json.dumps(e) for e in events))

    second_day = first_day + dt.timedelta(days=1)
    run = training_dag.test(logical_date=second_day, run_after=second_day, run_conf=conf,
                            mark_success_pattern=SKIPPED)
    assert run.state == "success", [(ti.task_id, ti.state) for ti in run.get_task_instances()]
    report = _xcom(run, "goodput")
    advice = report["advice"]["advice"]
    assert report["advice"]["line"].startswith(f"with L={advice['local_period']}, P={advice['persistent_period']} "
                                               "expected goodput ")
    stored = json.loads(Variable.get("mtc_advice.advice-run"))
    assert stored["advice"]["local_period"] == advice["local_period"]

    off = training_dag.test(logical_date=second_day + dt.timedelta(days=1), run_conf=conf,
                            mark_success_pattern=SKIPPED)
    assert _xcom(off, "plan")["checkpointing"]["local_checkpoint_period"] == 2  # param off: as given
    on = training_dag.test(logical_date=second_day + dt.timedelta(days=2), run_conf={**conf, "apply_advice": True},
                           mark_success_pattern=SKIPPED)
    planned = _xcom(on, "plan")["checkpointing"]
    assert (planned["local_checkpoint_period"], planned["checkpoint_period"]) == \
        (advice["local_period"], advice["persistent_period"])
