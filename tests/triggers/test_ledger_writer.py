"""The trigger's side of the run's ledger (triggers.ledger_writer): the facts it keeps from what the watch reads, and
its writes, off the loop, at most every flush interval, a failing one retried at the next flush without ending the
watch. Over the in-memory cluster, whose ConfigMaps keep data as the API server does
(tests/doubles/memory_jobset.py)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from mtc_provider.adapters.run_ledger import read_ledger
from mtc_provider.core.attempt.ledger import HOST_LOSS, PREEMPTION
from mtc_provider.triggers import ledger_writer
from mtc_provider.triggers.ledger_writer import LedgerWriter
from tests.triggers.test_js_attempt_end import _lock

T0 = 1_765_000_000.0


def test_each_new_restart_is_a_start_and_its_kind_comes_from_the_restarts_counted_towards_max():
    writer = LedgerWriter(attempt=2, restart=0, now=T0)
    writer.jobset(0, 0, T0 + 1)  # what the watch saw first: the baseline
    writer.saved(30, "persistent", T0 + 2)
    writer.jobset(1, 0, T0 + 10)  # RestartJobSetAndIgnoreMaxRestarts: a preemption
    writer.jobset(3, 2, T0 + 20)  # two more at once, both counted: host losses
    writer.jobset(3, 2, T0 + 30)  # the same status again: nothing new
    ledger = writer.ledger
    assert [(s.attempt, s.restart, s.at) for s in ledger.starts] == [
        (2, 0, T0), (2, 1, T0 + 10), (2, 2, T0 + 20), (2, 3, T0 + 20)]
    assert [(i.kind, i.restart, i.step) for i in ledger.interruptions] == [
        (PREEMPTION, 1, 30), (HOST_LOSS, 2, 30), (HOST_LOSS, 3, 30)]


def test_the_local_workloads_events_give_steps_restores_and_local_saves():
    writer = LedgerWriter(attempt=1, restart=0, now=T0)
    writer.workload_event({"ts": T0 + 5, "event": "restore", "step": 40, "tier": "local", "duration_s": 0.5})
    writer.workload_event({"ts": T0 + 9, "event": "step", "step": 41, "seconds": 0.15, "loss": 2.5})
    writer.workload_event({"ts": T0 + 9.5, "event": "save_end", "step": 42, "tier": "local"})
    writer.workload_event({"ts": T0 + 9.6, "event": "save_end", "step": 42, "tier": "persistent"})  # the listing's
    writer.workload_event({"ts": T0 + 9.7, "event": "restore", "step": 40, "tier": "ssd"})  # unknown tier: no tier
    writer.workload_event(None)
    start = writer.ledger.starts[0]
    assert (start.restored_step, start.restored_tier, start.restore_seconds, start.first_step_at) == (
        40, "local", 0.5, T0 + 9)
    assert [p.to_list() for p in writer.ledger.steps] == [[T0 + 9, 41, 2.5, 0.15]]
    assert [(s.step, s.tier) for s in writer.ledger.saves] == [(42, "local")]
    assert writer.restorable == 40


class _Trigger(SimpleNamespace):
    pass


async def test_a_failing_write_is_logged_once_and_the_facts_are_written_at_the_next_flush(cluster, monkeypatch,
                                                                                         caplog):
    lock = _lock(cluster)
    lock.acquire()
    writer = LedgerWriter(attempt=1, restart=0, now=T0, flush_s=60)
    trigger = _Trigger(log=logging.getLogger("trigger"))
    failures = [RuntimeError("HTTP 503"), RuntimeError("HTTP 503")]

    def run_lock(_trigger):
        if failures:
            raise failures.pop()
        return lock

    monkeypatch.setattr(ledger_writer, "run_lock", run_lock)
    with caplog.at_level(logging.WARNING, logger="trigger"):
        await writer.flush(trigger, T0)
        await writer.flush(trigger, T0 + 30)  # not due yet: no attempt
        assert len(failures) == 1
        await writer.flush(trigger, T0 + 60)
    assert [r.getMessage() for r in caplog.records if r.name == "trigger"] == [
        "could not write the run's ledger (RuntimeError: HTTP 503); trying again in 60 s"]
    assert read_ledger(lock).starts == ()
    writer.jobset(1, 1, T0 + 100)
    await writer.flush(trigger, T0 + 100)  # not due: the next flush is a minute after the last attempt
    assert read_ledger(lock).starts == ()
    await writer.flush(trigger, T0 + 101, final=True)  # the watch's end writes now
    assert read_ledger(lock) == writer.ledger and len(writer.ledger.starts) == 2


@pytest.mark.parametrize("owner, ti, found", [
    ({"dag_id": "d", "run_id": "r", "task_id": "train"}, None, True),  # the synchronous path: no task instance
    ({}, SimpleNamespace(dag_id="d", run_id="r", task_id="train"), True),
    ({}, None, False),  # `dag.test` of an older operator: nothing to write to
])
def test_the_lock_is_the_deferring_try_s(cluster, monkeypatch, owner, ti, found):
    from tests.doubles.memory_jobset import MemoryJobSetApi

    monkeypatch.setattr("mtc_provider.targets.jobset_api", lambda *a, **k: MemoryJobSetApi(cluster))
    trigger = _Trigger(extra={"run_name": "run", "namespace": "default", "owner": owner}, task_instance=ti,
                       connection={"kind": "local", "home": "/nonexistent"}, namespace="default")
    lock = ledger_writer.run_lock(trigger)
    assert (lock is not None) is found
    if found:
        assert lock.holder == _lock(cluster).holder
