"""Which stalls are followed in the same try (pure, plain values): the decision the trigger applies itself
(triggers.stall_end) and the worker applies to the same event (operators.jobset_end `settle`).

An event that is no JobSet end is judged as a stall when it is one, or when new pods never started after the run's
had (core.attempt.jobset_events.stall_cause); its decision is core.attempt.resubmission.decide_stalled, its end the
one rule with `stalled` (core.attempt.attempt_records.end_of_attempt): after restorable progress the same try
follows it, without it an Airflow retry, and hangs at one step end in the crash-loop guard.
"""

from __future__ import annotations

import pytest

from mtc_provider.core.attempt import ledger as L
from mtc_provider.core.attempt.attempt_records import end_of_attempt
from mtc_provider.core.attempt.jobset_events import (ENDED, ERROR, STALLED, STARTUP_TIMEOUT, UNSTARTABLE,
                                                     stall_cause)
from mtc_provider.core.attempt.resubmission import FAIL, RETRY, SUCCEED, decide_stalled


@pytest.mark.parametrize("kind, restarts, restored, history, cause", [
    (STALLED, 0, None, [None], L.STALL),  # a stall is a stall, before any progress too (the decision tells)
    (STALLED, 2, 40, [10, 30], L.STALL),
    (STARTUP_TIMEOUT, 0, None, [None], None),  # the run never started: a failure to start, not an interruption
    (STARTUP_TIMEOUT, 0, None, [], None),
    (STARTUP_TIMEOUT, 1, None, [None], L.STARTUP_TIMEOUT),  # an in-cluster restart's new pods never came up
    (STARTUP_TIMEOUT, 0, 12, [None], L.STARTUP_TIMEOUT),  # a start of the pods restored a step
    (STARTUP_TIMEOUT, 0, None, [None, 20], L.STARTUP_TIMEOUT),  # an earlier attempt saved a step
    (UNSTARTABLE, 3, 40, [10], None),  # a bad image never heals: fails the run
    (ENDED, 1, 40, [10], None),
    (ERROR, 1, 40, [10], None),
])
def test_which_events_are_judged_as_a_stall(kind, restarts, restored, history, cause):
    assert stall_cause(kind, restarts, restored, history) == cause


def _end(latest, history, restored=None, target=100, crash_loop=2):
    decision = decide_stalled(latest, target, history, crash_loop, why="stalled: no progress for 31s",
                              restored_step=restored)
    return end_of_attempt(decision, jobset="train-a2", namespace="ml", attempt=len(history), restarts=0,
                          latest=latest, history=history, phase_succeeded=False, try_number=1, max_tries=3,
                          target_step=target, last_try=False, stalled=True, restored=restored)


@pytest.mark.parametrize("latest, history, restored, kind, in_try, outcome, last_step", [
    (40, [10], None, RETRY, True, "disrupted", 40),  # progress, then a hang: the same try follows it
    (None, [None], 30, RETRY, True, "disrupted", 30),  # a restored local step is progress too
    (10, [10], None, RETRY, False, "disrupted", 10),  # no progress: an Airflow retry (the worker's)
    (20, [10, 20], None, RETRY, False, "disrupted", 20),  # the second hang at one step: a retry ...
    (20, [10, 20, 20], None, FAIL, False, "disrupted", 20),  # ... and the third the crash-loop guard's
    (100, [10], None, SUCCEED, False, "finished", 100),  # it reached the target before it hung
])
def test_a_stall_is_followed_in_the_try_only_after_restorable_progress(latest, history, restored, kind, in_try,
                                                                      outcome, last_step):
    end = _end(latest, history, restored)
    assert (end.kind, end.in_try, end.outcome, end.last_step) == (kind, in_try, outcome, last_step)
    if in_try:
        assert end.line.startswith(f"resubmitting in this try (attempt {len(history) + 1} next; no Airflow retry "
                                   "spent") and "stalled: no progress for 31s" in end.line, end.line
        assert end.run_state == "retrying" and end.in_try_from == history[-1]


def test_a_stalled_attempt_is_never_failed_in_its_record():
    """It was deleted by its own end: `disrupted`, with an interruption, even when the run fails for good."""
    end = _end(20, [10, 20, 20])
    assert end.kind == FAIL and end.outcome == "disrupted" and end.interruption is not None
    assert end.run_state == "failed" and "crash loop" in end.line
