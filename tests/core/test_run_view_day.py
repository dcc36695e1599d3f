"""The run view of a GKE-shaped day (tests/core/day_run.py): restarts live and ended, checkpoints by tier, attempts
apart from tries, interruptions by kind; with the run ledger and without it (what the XComs alone say)."""

from __future__ import annotations

from dataclasses import replace

from mtc_provider.core.view.run_page import run_view
from tests.core.day_run import facts


def test_the_live_attempts_in_cluster_restart_shows_while_it_runs():
    """The trigger's progress record says `restarts: 1` for attempt 3 (its record is still open with 0)."""
    shown = run_view(facts(with_ledger=False))
    assert [(r["attempt"], r["restarts"]) for r in shown["attempts"]] == [(1, 0), (2, 0), (3, 1)]
    assert shown["interruptions"]["restarts"] == 1
    ended = facts(with_ledger=False, progress={**facts().progress, "attempt": 4})
    ended.attempts[2] = replace(ended.attempts[2], end=ended.now - 5, outcome="disrupted", restarts=1)
    assert [r["restarts"] for r in run_view(ended)["attempts"]] == [0, 0, 1]  # ended: its record's own count


def test_attempts_and_tries_are_two_numbers_and_each_row_opens_its_tries_log():
    shown = run_view(facts(with_ledger=False))
    assert [(r["attempt"], r["try"], r["state"]) for r in shown["attempts"]] == [
        (1, 1, None), (2, 1, "up_for_retry"), (3, 2, "deferred")]
    assert [r["log_path"].rsplit("=", 1)[1] for r in shown["attempts"]] == ["1", "1", "2"]
    assert shown["attempts"][2]["log_path"] == "/dags/train_day/runs/manual__day/tasks/train?try_number=2"
    assert [(b["attempt"], b["try"]) for b in shown["timeline"]["bars"]] == [(1, 1), (2, 1), (3, 2)]


def test_replicator_backups_are_not_persistent_checkpoints():
    """No bucket checkpoint yet: the trigger's newest checkpoint 50400 is a replicator backup (its restorable
    source says so)."""
    shown = run_view(facts(with_ledger=False))
    tiers = {c["tier"]: c for c in shown["checkpoints"]}
    assert tiers["persistent"]["steps"] == [] and shown["live"]["newest_checkpoint"] is None
    assert tiers["replicator"]["visible"] and tiers["replicator"]["newest"] == 50400
    assert (shown["live"]["newest_restorable"], shown["live"]["newest_restorable_tier"]) == (
        50400, "MTC replicator backup")
    persistent = facts(with_ledger=False, progress={**facts().progress, "restorable_source": "checkpoints"})
    assert {c["tier"]: c["newest"] for c in run_view(persistent)["checkpoints"]}["persistent"] == 50400


def test_the_ledger_gives_every_tier_and_the_restores():
    shown = run_view(facts())
    tiers = {c["tier"]: c for c in shown["checkpoints"]}
    assert tiers["persistent"]["count"] == 0
    assert (tiers["replicator"]["newest"], tiers["replicator"]["incomplete"]) == (50400, [51300])
    assert "incomplete" in tiers["replicator"]["note"]
    assert tiers["local"]["visible"] and tiers["local"]["newest"] == 51600 and len(tiers["local"]["steps"]) == 30
    assert [(r["step"], r["tier"], r["duration_s"], r["restart"]) for r in shown["restores"]] == [
        (17100, "replicator", 90.0, 0), (30600, "replicator", 90.0, 0), (41000, "local", 30.0, 1)]


def test_graceful_preemptions_in_the_cluster_are_not_plain_restarts():
    shown = run_view(facts())["interruptions"]
    assert shown["by_kind"] == {"preemption": 1, "preemption-new-attempt": 1, "host-loss": 1}
    assert "graceful preemptions handled in the cluster: 1" in shown["summary"]
    assert "host losses: 1" in shown["summary"] and "1 in-cluster restarts in all" in shown["summary"]
    without = run_view(facts(with_ledger=False))["interruptions"]["summary"]
    assert "1 in-cluster restarts (cause not recorded)" in without
