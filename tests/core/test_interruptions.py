"""How many interruptions of each kind a run survived (core.attempt.interruptions), as the run view's JSON and `mtc status`
show them. The records are the launch operator's (operators.jobset `_finish`: `interruption` and `in_try` on each
retryable end) and older ones without those fields (their reason says which)."""

from __future__ import annotations

import json

import pytest

from mtc_provider.core.attempt.attempt_records import read_attempts
from mtc_provider.core.attempt.interruptions import count, summary
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.view.run_page import RunFacts, run_view

RECORDS = [
    {"attempt": 1, "jobset": "r-a1", "outcome": "disrupted", "interruption": "graceful", "in_try": True, "restarts": 0,
     "reason": "completed below target, likely preempted (...)"},
    {"attempt": 2, "jobset": "r-a2", "outcome": "disrupted", "interruption": "failed", "in_try": True, "restarts": 3,
     "reason": "failed after 3 in-cluster restarts: ReachedMaxRestarts"},
    {"attempt": 3, "jobset": "r-a3", "outcome": "disrupted", "interruption": "failed", "in_try": False, "restarts": 0,
     "reason": "stalled"},
    # an older record: no `interruption`; its reason is decide's for a graceful end
    {"attempt": 4, "jobset": "r-a4", "outcome": "disrupted", "restarts": 1,
     "reason": "completed below target, likely preempted (last finalized step 60, target 100)"},
    {"attempt": 5, "jobset": "r-a5", "outcome": "finished", "restarts": 2, "reason": "training reached its target"},
]


def test_counts_by_kind_with_in_cluster_restarts_and_attempts_followed_in_the_same_try():
    assert count(read_attempts(RECORDS)) == {"graceful": 2, "failed": 2, "restarts": 6, "in_try": 2}
    assert count([]) == {"graceful": 0, "failed": 0, "restarts": 0, "in_try": 0}
    # a 0.1.0 record that failed: no `interruption`, no `in_try`, a reason that is not a graceful end's
    assert count(read_attempts([{"attempt": 1, "jobset": "r-a1", "outcome": "disrupted", "reason": "stalled"}])) == {
        "graceful": 0, "failed": 1, "restarts": 0, "in_try": 0}


@pytest.mark.parametrize("records, field", [
    ({"attempt": 1}, "attempts"),
    ([None], r"attempts\[0\]"),
    ([{"attempt": 1, "restarts": True}], r"attempts\[0\]\.restarts"),
    ([RECORDS[0], {"attempt": 2, "outcome": "preempted"}], r"attempts\[1\]\.outcome"),
    ([{"attempt": 1, "interruption": "maybe"}], r"attempts\[0\]\.interruption"),
    ([{"attempt": "1"}], r"attempts\[0\]\.attempt"),
    ([{"attempt": 1, "start": "08:00"}], r"attempts\[0\]\.start"),
])
def test_a_bad_record_is_refused_naming_its_field(records, field):
    with pytest.raises(SpecError, match=field):
        read_attempts(records)


def test_the_run_view_carries_the_counts_and_their_line():
    view = run_view(RunFacts(dag_id="d", run_id="r", run_state="running", launch_task_id="train",
                             attempts=read_attempts(RECORDS)))
    assert view["interruptions"]["graceful"] == 2 and view["interruptions"]["restarts"] == 6
    assert view["interruptions"]["summary"] == (
        "interruptions survived: 2 graceful (preemption/maintenance), 2 failed (restarts used up, stalls), 6 "
        "in-cluster restarts (cause not recorded); 2 attempts followed in the same try (no Airflow retry spent)")
    json.dumps(view)  # the page polls it as JSON


def test_mtc_status_shows_the_line(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from mtc_provider.adapters.run_records import RunRecords
    from mtc_provider.cli.app import app
    from mtc_provider.core.attempt.run_summary import run_record

    monkeypatch.delenv("KUBECONFIG", raising=False)
    where = str(tmp_path / "out" / "r" / "checkpoints")
    RunRecords(where).write(where, run_record(
        run_name="r", namespace="default", checkpoint_dir=where, target_step=100, state="succeeded",
        attempts=RECORDS, owner={"dag_id": "d"}, now=3.0))
    result = CliRunner().invoke(app, ["status", "r", "--base", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert summary(count(read_attempts(RECORDS))) in " ".join(result.stdout.split()), result.stdout
    data = json.loads(CliRunner().invoke(app, ["status", "r", "--base", str(tmp_path / "out"), "-o", "json"]).stdout)
    assert data["interruptions"] == count(read_attempts(RECORDS))


def test_one_stored_record_is_checked_by_from_dict_naming_where_it_was_read():
    from mtc_provider.core.attempt.attempt_records import AttemptRecord

    with pytest.raises(SpecError, match=r"^lock\.restarts: -2 is not allowed; allowed: a non-negative integer$"):
        AttemptRecord.from_dict({"attempt": 1, "jobset": "r-a1", "restarts": -2}, "lock")
    assert AttemptRecord.from_dict({"attempt": 1, "jobset": "r-a1"}).restarts == 0  # 0.1.0's records keep loading
