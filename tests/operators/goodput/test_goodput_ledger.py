"""GoodputReportOperator with the run ledger (the launch task's `ledger` XCom): its figures are the ledger's
intervals, the same the run view shows, and its chart draws those intervals. The run: tests/core/day_run.py, a
GKE-shaped run of 30 hours (three attempts over two tries, an in-cluster restart), here ended at 30 h."""

from __future__ import annotations

import pytest

from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.view.run_page import run_view
from mtc_provider.operators.goodput import GoodputReportOperator
from tests.core import day_run
from tests.core.day_run import EXPECTED_GOODPUT, EXPECTED_PRODUCTIVE_S, H, NOW, T0

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class LaunchXComs:
    """The task instance's XComs as Airflow's `xcom_pull(task_ids=..., key=...)` returns them (one task id: its
    value, None when absent), and what the operator pushes."""

    dag_id, run_id = "train_day", "manual__day"

    def __init__(self, pulled: dict) -> None:
        self.pulled, self.pushed = pulled, {}

    def xcom_pull(self, task_ids: str, key: str):
        return self.pulled.get((task_ids, key))

    def xcom_push(self, key: str, value) -> None:
        self.pushed[key] = value


def ended_attempts() -> list[dict]:
    attempts = [dict(a) for a in day_run.ATTEMPTS]
    attempts[-1].update(end=NOW, outcome="finished", last_step=51680)
    return attempts


def _report(tmp_path, ledger) -> dict:
    ti = LaunchXComs({("train", "attempts"): ended_attempts(), ("train", "ledger"): ledger})
    operator = GoodputReportOperator(task_id="goodput", checkpoint_dir="gs://ckpt/day/checkpoints",
                                     attempts_task_id="train", chart_path=str(tmp_path / "goodput.png"))
    return operator.execute({"run_id": "manual__day", "ti": ti})


def test_the_task_reports_the_ledgers_intervals_as_the_run_view_does(tmp_path):
    result = _report(tmp_path, day_run.ledger())
    assert result["source"] == "run ledger"
    assert result["goodput"] == pytest.approx(EXPECTED_GOODPUT)  # 95.7 %, not the commit times' handful of points
    assert result["productive_s"] == pytest.approx(EXPECTED_PRODUCTIVE_S)
    assert result["elapsed_s"] == pytest.approx(30 * H)
    assert result["badput_s"]["downtime"] == pytest.approx(720.0) and result["disruptions"] == 3
    ended = dict(run_state="success", attempts=ended_attempts(), run_end=NOW + 60, now=NOW + 600)
    so_far = run_view(day_run.facts(**ended))["goodput"]
    final = run_view(day_run.facts(goodput=result, **ended))["goodput"]
    assert so_far["goodput"] == pytest.approx(result["goodput"])  # the view before the task ran, and after
    assert (final["goodput"], final["source"]) == (result["goodput"], "goodput task (run ledger)")
    assert (tmp_path / "goodput.png").read_bytes()[:8] == PNG_MAGIC


def test_the_chart_draws_the_ledgers_intervals(tmp_path):
    from PIL import Image

    from mtc_provider.core.view.run_goodput import timeline_from_ledger

    timeline = timeline_from_ledger(day_run.ledger(), end=NOW)
    assert [(a.start - T0, a.end - T0, a.outcome) for a in timeline.attempts] == [
        (60, 10 * H, "disrupted"), (10 * H + 240, 18 * H, "failed"), (18 * H + 360, 24 * H, "disrupted"),
        (24 * H + 120, 30 * H, "running")]
    assert [(r.step, r.tier, r.end - r.start) for r in timeline.restores] == [
        (17100, "replicator", 90.0), (30600, "replicator", 90.0), (41000, "local", 30.0)]
    assert {s.tier for s in timeline.saves} == {"local", "replicator"}
    _report(tmp_path, day_run.ledger())
    drawn = Image.open(tmp_path / "goodput.png").text["Description"]
    assert "restores" in drawn and "local-tier checkpoints" in drawn


def test_a_ledger_the_task_cannot_read_names_the_field_before_any_chart(tmp_path):
    with pytest.raises(SpecError, match=r"ledger\.starts\[0\]\.restored_tier: 'ramdisk'"):
        _report(tmp_path, {**day_run.ledger(), "starts": [{**day_run.ledger()["starts"][0],
                                                            "restored_tier": "ramdisk"}]})
    assert not (tmp_path / "goodput.png").exists()


def test_the_run_views_chart_of_a_week_is_the_ledgers_whole_run(tmp_path):
    """A week of steps thinned to the ledger's 2000 points, with loss: drawn over wall-clock time end to end, the
    interruptions by kind (graceful apart from failures), the loss on its own axis."""
    from PIL import Image

    from mtc_provider.core.attempt.ledger import RunLedger, StepPoint
    from mtc_provider.core.view.goodput import compute_goodput
    from mtc_provider.core.view.run_page import chart_data
    from mtc_provider.operators.goodput import chart_span, render_chart

    week = RunLedger.from_dict(day_run.ledger()).add_steps(
        StepPoint(T0 + 30 * H + 60 * k, 51700 + 30 * k, 2.0 - k / 1e5, 2.0) for k in range(138 * 60))
    assert 1000 < len(week.steps) <= 2000  # thinned in time (core.attempt.ledger.thin_steps)
    later = T0 + 7 * 24 * H
    found = chart_data(day_run.facts(ledger=week.to_dict(), now=later, progress={**day_run.PROGRESS,
                                                                                 "updated_at": later - 60}))
    timeline, marks = found
    assert chart_span(timeline) == (T0 + 60, later)
    assert len(marks["loss"]) == len(week.steps) and [kind for _, kind in marks["interruptions"]] == [
        "preemption-new-attempt", "host-loss", "preemption"]
    path = render_chart(timeline, compute_goodput(timeline), tmp_path / "week.png", **marks)
    drawn = Image.open(path).text["Description"]
    assert "graceful preemptions; failures" in drawn and "; loss;" in drawn
    assert drawn.endswith("span: 2027-01-15T08:01:00Z - 2027-01-22T08:00:00Z")


def test_the_charts_title_dates_its_span():
    from mtc_provider.core.view.run_page import chart_title

    title = chart_title({"goodput": EXPECTED_GOODPUT, "elapsed_s": 30 * H},
                        {"start": T0, "end": NOW})
    assert title == "goodput 95.7% over 1d6h (2027-01-15 08:00 UTC - 2027-01-16 14:00 UTC)"


def test_a_ledger_without_a_start_yet_leaves_the_figures_to_the_checkpoints(tmp_path):
    """A run that ended before its trigger saw a start of the pods (a short run, watched from its end) has a ledger
    with its decision only: the task reports from the checkpoints' commit times instead of failing on it."""
    checkpoints = tmp_path / "out" / "run" / "checkpoints"
    for step in (6, 12):
        (checkpoints / str(step)).mkdir(parents=True)
        (checkpoints / str(step) / "commit_success.txt").write_text("")
    only_decided = {"version": 1, "starts": [], "steps": [], "saves": [], "interruptions": [],
                    "decisions": [{"at": NOW, "attempt": 1, "kind": "succeed", "reason": "training reached its target"}]}
    ti = LaunchXComs({("train", "attempts"): [], ("train", "ledger"): only_decided})
    operator = GoodputReportOperator(task_id="goodput", checkpoint_dir=str(checkpoints), attempts_task_id="train",
                                     chart_path=str(tmp_path / "goodput.png"))
    result = operator.execute({"run_id": "manual__short", "ti": ti})
    assert result["source"] == "checkpoint commit times" and result["last_productive_step"] == 12, result
