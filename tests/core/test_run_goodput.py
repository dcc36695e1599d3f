"""Goodput from a run's intervals (core/view/run_goodput.py) and as the run view shows it: a GKE-shaped day written
out by hand (tests/core/day_run.py: the arithmetic is in its docstring), with its run ledger and without one."""

from __future__ import annotations

import pytest

from mtc_provider.core.attempt.ledger import RunLedger
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.view.run_goodput import goodput_from_attempts, goodput_from_ledger
from mtc_provider.core.view.run_page import Try, run_view
from tests.core import day_run
from tests.core.day_run import EXPECTED_GOODPUT, H, NOW, T0, facts, ledger


def test_a_day_from_the_ledger_is_its_intervals():
    report = goodput_from_ledger(ledger(), end=NOW, begin=T0)
    assert report["productive_s"] == pytest.approx(day_run.EXPECTED_PRODUCTIVE_S)
    assert report["goodput"] == pytest.approx(EXPECTED_GOODPUT)
    assert report["badput_s"] == {
        "startup": 690.0,  # 60 (launch to the first start) + 240 + 150 + 150 + 90 (first steps, less restores)
        "restore": 210.0,  # 90 + 90 + 30
        "wasted_progress": 3020.0,  # (750 + 660 + 100) steps re-done, 2 s each
        "downtime": 720.0,  # 240 + 360 + 120: the 12 minutes of gaps
        "waiting_for_capacity": 0.0, "other": 0.0}
    assert report["recovery_s"] == [480.0, 600.0, 240.0]  # interruption to the next first step
    assert report["disruptions"] == 3


def test_a_day_without_the_ledger_is_within_a_point_of_its_intervals():
    """The page on GKE without a ledger: 3 attempts over 2 tries, the records' kept steps and the trigger's rate."""
    shown = run_view(facts(with_ledger=False))["goodput"]
    assert shown["goodput"] == pytest.approx(EXPECTED_GOODPUT, abs=0.01), shown
    assert shown["elapsed_s"] == pytest.approx(30 * H)
    assert shown["badput_s"]["startup"] == 0.0  # nothing unknown is called start-up


def test_the_page_uses_the_ledger_when_the_run_has_one():
    shown = run_view(facts())["goodput"]
    assert shown["goodput"] == pytest.approx(EXPECTED_GOODPUT, abs=1e-6)
    assert shown["source"] == "so far, from the run ledger's intervals"


def test_a_ledger_start_without_its_first_step_uses_the_first_step_seen():
    """The ledger's steps are downsampled: the first sample in a start's interval bounds its first step."""
    data = ledger()
    data["starts"][0]["first_step_at"] = None  # start 1's first sample is at its first step (T0 + 300)
    assert goodput_from_ledger(data, end=NOW, begin=T0)["goodput"] == pytest.approx(EXPECTED_GOODPUT)
    data["steps"] = [row for row in data["steps"] if row[0] != T0 + 300]  # the next sample is 30 minutes later
    assert goodput_from_ledger(data, end=NOW, begin=T0)["goodput"] == pytest.approx(EXPECTED_GOODPUT - 1800 / (30 * H))


def test_a_run_waiting_for_capacity_shows_its_wait_as_such():
    """Attempt 3's JobSet lost its capacity at 24 h (a preemption that took a new attempt); its pods have been
    unschedulable since: six hours of waiting, not training and not start-up."""
    data = ledger()
    data["starts"] = data["starts"][:3]
    data["interruptions"][-1] = {**data["interruptions"][-1], "kind": "preemption-new-attempt"}
    data["steps"] = [row for row in data["steps"] if row[0] <= T0 + 24 * H]
    report = goodput_from_ledger(data, end=NOW, begin=T0, waiting=True)
    assert report["badput_s"]["waiting_for_capacity"] == pytest.approx(6 * H)
    assert report["productive_s"] == pytest.approx(34200 + 27000 + 21000)  # start 3 keeps all it did
    first = goodput_from_ledger({"version": 1, "starts": []}, end=T0 + 600, begin=T0, waiting=True)
    assert (first["goodput"], first["badput_s"]["waiting_for_capacity"]) == (0.0, 600.0)


def test_the_page_of_a_run_waiting_for_capacity_says_so():
    pending = {"name": "train-a3-slice-0-0", "phase": "Pending", "leader": True, "waiting": "Unschedulable",
               "message": "0/12 nodes are available: 12 Insufficient google.com/tpu."}
    data = ledger()
    data["starts"] = data["starts"][:3]
    shown = run_view(facts(ledger=data, cluster={"pods": [pending]}))
    assert shown["waiting_for"].startswith("capacity")
    assert shown["goodput"]["waiting"] and shown["goodput"]["badput_s"]["waiting_for_capacity"] > 5 * H


def test_a_finished_run_without_a_goodput_report_is_not_mostly_wasted():
    """Two 10-hour attempts 10 minutes apart, finished at the target; no goodput task ran. The trigger's last
    report measured 1800 steps/h; 5 minutes of each attempt went to its start."""
    attempts = [
        {"attempt": 1, "try": 1, "jobset": "a1", "start": T0, "end": T0 + 10 * H, "outcome": "disrupted",
         "restarts": 0, "last_step": 17700, "interruption": "graceful", "in_try": True},
        {"attempt": 2, "try": 1, "jobset": "a2", "start": T0 + 10 * H + 600, "end": T0 + 20 * H + 600,
         "outcome": "finished", "restarts": 0, "last_step": 35400}]
    ended = facts(with_ledger=False, run_state="success", attempts=attempts,
                  tries=[Try(1, "success", T0, T0 + 20 * H + 600)], progress={"step": 35400, "steps_per_hour": 1800.0, "updated_at": T0 + 20 * H + 590},
                  now=T0 + 40 * H, run_end=T0 + 20 * H + 700)
    shown = run_view(ended)["goodput"]
    assert shown["elapsed_s"] == pytest.approx(20 * H + 600)
    assert shown["goodput"] == pytest.approx(35400 * 2 / (20 * H + 600), abs=0.01)  # 97.5 %


def test_without_a_measured_step_time_there_is_no_figure():
    assert goodput_from_attempts([{"start": T0, "end": None, "from_step": 0, "kept_step": 10}], end=NOW,
                                 step_seconds=None) is None
    shown = run_view(facts(with_ledger=False, progress={"restarts": 0}))["goodput"]
    assert shown["goodput"] is None and shown["source"].startswith("not yet: no step time measured")


def test_a_ledger_this_version_cannot_read_is_named_and_the_attempts_are_used():
    """One parser (core.attempt.ledger.RunLedger.from_dict): its SpecError names the field, here and on the page."""
    with pytest.raises(SpecError, match=r"ledger\.version: 2 is not allowed; allowed: 1"):
        goodput_from_ledger({"version": 2, "starts": []}, end=NOW)
    with pytest.raises(SpecError, match=r"ledger\.starts\[0\]\.attempt: None is not allowed"):
        goodput_from_ledger({"version": 1, "starts": [{"at": "soon"}]}, end=NOW)
    with pytest.raises(SpecError, match=r"ledger\.steps\[0\]: \[1\.0, 2\] is not allowed"):
        goodput_from_ledger({"version": 1, "steps": [[1.0, 2]]}, end=NOW)
    shown = run_view(facts(ledger={"version": 2}))["goodput"]
    assert "the run ledger was not read: ledger.version: 2 is not allowed" in shown["source"]
    assert shown["goodput"] == pytest.approx(EXPECTED_GOODPUT, abs=0.01)


def test_the_typed_ledger_and_its_dict_give_the_same_figures():
    typed = RunLedger.from_dict(ledger())
    assert goodput_from_ledger(typed, end=NOW, begin=T0) == goodput_from_ledger(ledger(), end=NOW, begin=T0)
    assert goodput_from_ledger(typed.to_dict(), end=NOW, begin=T0)["goodput"] == pytest.approx(EXPECTED_GOODPUT)
