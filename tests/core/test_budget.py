"""The run's budget (core.attempt.budget): tables of runs that get somewhere and runs that do not."""

from __future__ import annotations

import pytest

from mtc_provider.core.attempt.attempt_records import end_of_attempt
from mtc_provider.core.attempt.budget import Budget, BudgetCheck, Span, derived_min_steps, goodput, per_interruption, \
    spans_of
from mtc_provider.core.attempt.resubmission import FAIL, RETRY, Decision
from mtc_provider.core.attempt.run_summary import FAILED, RETRYING
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.definition.description.spec import CheckpointingSpec

P = 5  # the run's shortest save period (local_checkpoint_period)
BUDGET = Budget(window=6, min_steps_per_interruption=P)
HOUR = 3600.0


def _attempts(gains: list[int], interruptions: int) -> tuple[Span, ...]:
    """Attempts that each gained `gains[i]` restorable steps through `interruptions` interruptions."""
    spans, step = [], None
    for gain in gains:
        end = (step or 0) + gain
        spans.append(Span(step, end, interruptions))
        step = end
    return tuple(spans)


@pytest.mark.parametrize("case, spans, over", [
    # host losses 10 steps apart, each start restoring the newest local save: two saves per interruption
    ("host losses between saves", _attempts([30, 30], 3), False),
    # the guide's cadence: hours between interruptions, minutes between saves
    ("a healthy week", _attempts([4000, 3500, 5000], 1), False),
    # a crash after every save: the restarts restore one save each, whatever maxRestarts allows
    ("a crash after every save", _attempts([15, 15], 3), True),
    ("one step saved per crash", _attempts([1] * 8, 1), True),
    ("nothing restorable", _attempts([0, 0, 0], 2), True),
    ("too few interruptions to judge", _attempts([1, 1], 2), False),
    ("a slow start, then training", (Span(None, 0, 5), Span(0, 400, 1)), False),
])
def test_progress_per_interruption(case, spans, over):
    verdict = per_interruption(spans, BUDGET)
    assert (verdict is not None) == over, (case, verdict)


def test_the_verdict_names_the_window_the_steps_and_the_setting():
    verdict = per_interruption(_attempts([15, 15], 3), BUDGET)
    assert verdict == ("over budget: the last 6 interruptions (attempts 1-2) gained 30 restorable steps (from step 0 "
                       "to 30), not more than 5 (min_steps_per_interruption) each; the run is interrupted about as "
                       "often as it saves, so it is ended rather than restarted again")


def test_the_window_counts_only_the_newest_interruptions():
    """A bad start is forgiven once the newest six interruptions trained well."""
    spans = (*_attempts([0, 0, 0], 2), Span(0, 20, 3), Span(20, 200, 3))
    assert per_interruption(spans, BUDGET) is None
    assert per_interruption(spans[:4], BUDGET) is not None  # the window then reached back into the bad start


@pytest.mark.parametrize("budget", [Budget(window=0, min_steps_per_interruption=P), Budget(window=6)])
def test_the_progress_rule_can_be_off(budget):
    assert per_interruption(_attempts([0] * 10, 1), budget) is None


def test_goodput_over_the_last_hours():
    budget = Budget(window=0, min_goodput=0.1, goodput_window=6 * HOUR)
    # seven hours; in the last six only 100 steps of 2 s were kept: 200 s of 21600 s, 0.9 %
    spans = (Span(None, 1000, 1, 0.0, HOUR), Span(1000, 1050, 1, HOUR, 4 * HOUR), Span(1050, 1100, 1, 4 * HOUR))
    now = 7 * HOUR
    verdict = goodput(spans, budget, now, step_seconds=2.0)
    assert verdict is not None and "goodput 0.9 %, under min_goodput 10 %" in verdict, verdict
    assert goodput(spans, budget, now, step_seconds=40.0) is None  # 4000 s of 21600 s: 18.5 %
    assert goodput(spans, budget, now, step_seconds=None) is None  # no step time: not judged
    assert goodput(spans, budget, 5 * HOUR, step_seconds=2.0) is None  # the run has not lasted the window
    assert goodput(spans, Budget(min_goodput=0.0), now, step_seconds=2.0) is None  # the rule is off


def test_spans_from_attempt_records():
    records = [
        {"attempt": 1, "start": 10.0, "end": 20.0, "outcome": "disrupted", "restarts": 2, "last_step": 15},
        {"attempt": 1, "start": 10.0, "end": 20.0, "outcome": "disrupted", "restarts": 2, "last_step": 15},  # again
        {"attempt": 2, "start": 21.0, "end": 40.0, "outcome": "finished", "restarts": 1, "last_step": 60},
        {"attempt": 3, "start": 41.0, "end": None, "last_step": 60},  # still open: not a span
    ]
    assert spans_of(records) == (Span(None, 15, 3, 10.0, 20.0), Span(15, 60, 1, 21.0, 40.0))


def test_an_attempt_s_check_leaves_out_its_own_record_and_starts_at_its_start():
    """Both ends of an attempt (the worker's, the trigger's next attempt) judge it against the attempts before it:
    its own record, already closed when a second copy of the trigger judges again, is not an earlier span."""
    records = [
        {"jobset": "r-a1", "attempt": 1, "start": 10.0, "end": 20.0, "outcome": "disrupted", "restarts": 0,
         "last_step": 15},
        {"jobset": "r-a2", "attempt": 2, "start": 21.0, "end": 40.0, "outcome": "disrupted", "restarts": 1,
         "last_step": 30},
    ]
    check = BudgetCheck.for_attempt(BUDGET, records, "r-a2", 2.0)
    assert check.earlier == (Span(None, 15, 1, 10.0, 20.0),) and check.started == 21.0 and check.step_seconds == 2.0
    assert BudgetCheck.for_attempt(BUDGET, records, "r-a3", None, started=41.0).earlier == spans_of(records)
    assert BudgetCheck.for_attempt(BUDGET, records, "r-a3", None, started=41.0).started == 41.0


def test_derived_min_steps_is_the_shortest_restorable_save_period():
    emergency = CheckpointingSpec(run_name="r", base_output_directory="gs://b/o", steps=100,
                                  enable_emergency_checkpoint=True, local_checkpoint_directory="/local",
                                  local_checkpoint_period=5, checkpoint_period=50)
    assert derived_min_steps(emergency) == 5
    persistent_only = CheckpointingSpec(run_name="r", base_output_directory="gs://b/o", steps=100,
                                        checkpoint_period=50)
    assert derived_min_steps(persistent_only) == 50


@pytest.mark.parametrize("fields, field, value", [
    (("-1", "derived", 0.1, 3600), "budget_interruptions", "-1"),
    ((6, 0, 0.1, 3600), "min_steps_per_interruption", 0),
    ((6, "derived", 1.5, 3600), "min_goodput", 1.5),
    ((6, "derived", "a tenth", 3600), "min_goodput", "a tenth"),
    ((6, "derived", 0.1, 0), "goodput_window", 0),
])
def test_bad_settings_are_refused_naming_the_field(fields, field, value):
    with pytest.raises(SpecError) as info:
        Budget.parse(*fields, derived_steps=5)
    assert info.value.field == field and info.value.value == value


def test_rendered_settings_parse():
    assert Budget.parse("6", "derived", "0.2", "7200", derived_steps=5) == Budget(6, 5, 0.2, 7200.0)
    assert Budget.parse(6, "12", 0, 3600, derived_steps=5).min_steps_per_interruption == 12


def test_an_attempt_over_budget_ends_the_run_instead_of_the_next_attempt():
    """The same interruption after progress goes on in the same try within the budget, and fails the run over it."""
    check = BudgetCheck(BUDGET, _attempts([15], 3), started=100.0)
    common = dict(jobset="j-a2", namespace="default", attempt=2, restarts=2, latest=None, history=[None, 15],
                  phase_succeeded=False, try_number=1, max_tries=2, target_step=100, last_try=False, restored=30,
                  now=200.0)
    decision = Decision(RETRY, "failed after 2 in-cluster restarts")
    within = end_of_attempt(decision, **common)
    assert within.in_try and within.run_state == RETRYING
    over = end_of_attempt(decision, **common, budget=check)
    assert over.kind == FAIL and not over.in_try and over.run_state == FAILED
    assert over.line.startswith("over budget: the last 6 interruptions (attempts 1-2) gained 30 restorable steps")
    healthy = BudgetCheck(BUDGET, _attempts([40], 3), started=100.0)
    assert end_of_attempt(decision, **{**common, "history": [None, 40], "restored": 80}, budget=healthy).in_try
