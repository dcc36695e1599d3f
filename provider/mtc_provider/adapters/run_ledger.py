"""The run's ledger in its run lock (core.attempt.ledger; I/O only): read it, and add facts to it.

It is the `ledger` key of the run lock's ConfigMap (adapters.run_lock), a JSON document, so people read it with
`kubectl get configmap mtc-run-<run_name> -n <namespace> -o jsonpath='{.data.ledger}'`. Two writers add to it (the
trigger while the task is deferred, the attempt's end through adapters.attempt_journal), and two live copies of one
trigger may write at once: each write merges its facts into what is stored (an idempotent union) through the lock's
compare-and-set, which re-reads on a conflict (RunLock.update), so no writer loses another's facts.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from mtc_provider.adapters.run_lock import LEDGER, RunLock
from mtc_provider.core.attempt.ledger import RunLedger
from mtc_provider.core.basics.errors import SpecError

log = logging.getLogger(__name__)


def stored_ledger(data: Mapping[str, Any]) -> RunLedger:
    """The ledger of a run lock's contents (RunLock.read()); one that does not read is logged and counts as empty,
    so the next write replaces it rather than stopping every later write."""
    try:
        return RunLedger.from_dict(data.get(LEDGER) or {})
    except SpecError as exc:
        log.warning("the run lock's ledger does not read (%s): it is written again from the facts seen now", exc)
        return RunLedger()


def read_ledger(lock: RunLock) -> RunLedger:
    """The run's ledger as stored now (empty when the lock or its ledger is absent)."""
    return stored_ledger(lock.read())


def merge_into(data: dict[str, Any], facts: RunLedger) -> RunLedger:
    """The run lock's contents with `facts` merged into their ledger (a change for RunLock.update); the ledger."""
    merged = stored_ledger(data).merge(facts)
    data[LEDGER] = merged.to_dict()
    return merged


def add_to_ledger(lock: RunLock, facts: RunLedger) -> RunLedger | None:
    """Merge `facts` into the stored ledger; the ledger written, or None when the lock is not this holder's (or
    gone: the run is over)."""
    written: list[RunLedger] = []
    lock.update(lambda data: written.append(merge_into(data, facts)))
    return written[-1] if written else None
