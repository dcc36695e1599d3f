"""The worker applies the trigger's verdict as it is (issue 40, finding 9: an attempt's end is decided once).

Pure: `operators.jobset_end.judge` on plain values. The trigger decided on its own listing; the worker, judging
the same event, must not decide again from what it would see (here a failed JobSet at its target, which
core.attempt.resubmission.decide would call a success, and a non-retryable failure it would end for good).
"""

from __future__ import annotations

import pytest

from mtc_provider.core.attempt.jobset_events import ENDED, JobSetEvent
from mtc_provider.core.attempt.resubmission import FAIL, RETRY, SUCCEED, decide
from mtc_provider.core.attempt.status import FAILED, JobSetState
from mtc_provider.operators.jobset_end import TryFacts, judge

FACTS = TryFacts(try_number=1, max_tries=3, last_try=False, completion=False, crash_loop_attempts=3)


def _event(state: JobSetState, verdict: dict | None) -> JobSetEvent:
    extra = {"attempt": 1, "target_step": 100, "history": [0], "budget": None}
    return JobSetEvent(ENDED, "ml", "train", state, 0, "ended", extra, verdict=verdict)


@pytest.mark.parametrize("state, latest, own", [
    (JobSetState("train", "ml", FAILED), 100, SUCCEED),  # at the target by the worker's listing
    (JobSetState("train", "ml", FAILED, retryable=False, reason="ImagePull"), 40, FAIL),
])
def test_the_triggers_verdict_is_applied_not_decided_again(state, latest, own):
    assert decide(state, latest, 100, [0], 3).kind == own  # what the worker would decide by itself
    verdict = {"kind": RETRY, "reason": "the trigger's listing: step 40 of 100", "latest_step": 40}
    decision, end = judge(FACTS, _event(state, verdict), latest=40)
    assert (decision.kind, decision.reason) == (RETRY, verdict["reason"])
    assert (end.kind, end.reason, end.last_step) == (RETRY, verdict["reason"], 40), end


def test_without_a_verdict_the_worker_decides_by_the_same_rule():
    state = JobSetState("train", "ml", FAILED, retryable=False, reason="ImagePull")
    decision, _ = judge(FACTS, _event(state, None), latest=40)
    assert decision == decide(state, 40, 100, [0], 3)
