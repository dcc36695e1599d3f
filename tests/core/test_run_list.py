"""The runs list's row (core/view/run_list.py) of the GKE-shaped day of tests/core/day_run.py: the figures an
on-call engineer scans, the same the run's own page shows."""

from __future__ import annotations

from mtc_provider.core.view.run_list import COLUMNS, run_row
from mtc_provider.core.view.run_page import Try
from tests.core import day_run
from tests.core.day_run import EXPECTED_GOODPUT, facts


def test_a_day_long_gke_run_in_the_list():
    row = run_row(facts())
    assert tuple(row) == COLUMNS
    assert row["state"] == "running"
    assert row["step"] == "51,650 / 100,000 (51.6%)"  # the trigger's progress XCom (no leader lines read here)
    assert row["rate"] == "1,800 steps/h" and row["ETA"] == "1d2h"  # 48,350 steps at 1,800 an hour
    assert row["goodput"] == f"{100 * EXPECTED_GOODPUT:.1f}% so far" == "95.7% so far"
    assert row["interruptions"] == "3"  # the ledger's: a graceful preemption each way and a host loss
    assert row["newest restorable step"] == "50,400 (MTC replicator backup)"  # never called persistent


def test_with_a_ledger_its_interruptions_count():
    """An orchestrator fault the attempt trained through is in the ledger only: the records know of none."""
    data = day_run.ledger()
    data["interruptions"].append({"at": day_run.T0 + 26 * day_run.H, "attempt": 3, "kind": "orchestrator-fault",
                                  "step": 45000, "restart": None})
    assert run_row(facts(ledger=data))["interruptions"] == "4"


def test_without_a_ledger_the_live_restart_counts():
    row = run_row(facts(with_ledger=False))
    assert row["interruptions"] == "3"  # attempt 1 graceful, attempt 2 failed, and attempt 3's live restart


def test_a_run_waiting_for_capacity_says_so_and_has_no_eta():
    pending = {"name": "train-a3-slice-0-0", "phase": "Pending", "leader": True, "waiting": "Unschedulable",
               "message": "0/12 nodes are available"}
    row = run_row(facts(cluster={"pods": [pending]}))
    assert (row["state"], row["ETA"]) == ("running (waiting for capacity)", "waiting")


def test_an_ended_run_has_no_eta_and_a_final_goodput():
    row = run_row(facts(run_state="success", tries=[Try(1, "success", day_run.T0, day_run.NOW)],
                        goodput={"goodput": 0.957, "source": "run ledger"}))
    assert (row["state"], row["ETA"], row["goodput"]) == ("success", "", "95.7%")

