"""The outage budget (core.attempt.outage): backoff capped, Retry-After honoured (RFC 9110 section 10.2.3), bounded."""

from __future__ import annotations

import pytest

from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.attempt.outage import RETRY_AFTER_CAP, OutageClock, validate


@pytest.mark.parametrize("failures, retry_after, expected", [
    (1, None, 1.0), (2, None, 2.0), (4, None, 8.0), (10, None, 30.0),  # doubling, capped at max_backoff
    (1, 20.0, 20.0),  # the server's Retry-After wins over a shorter backoff
    (10, 5.0, 30.0),  # ... but never shortens the backoff
    (1, 10_000.0, RETRY_AFTER_CAP),  # an absurd Retry-After is capped
])
def test_backoff_is_capped_and_honours_retry_after(failures, retry_after, expected):
    clock = OutageClock(timeout=100_000, max_backoff=30)
    for n in range(failures - 1):
        clock.failed(float(n), "HTTP 503")
    assert clock.failed(float(failures), "HTTP 503", retry_after) == expected


def test_the_budget_bounds_the_wait_and_an_answer_resets_it():
    clock = OutageClock(timeout=10, max_backoff=60, log_interval=4)
    assert clock.should_log(0) is True
    assert clock.failed(0, "HTTP 503") == 1 and not clock.exhausted(0)
    assert clock.failed(8, "no HTTP answer", retry_after=30) == 2  # never past the budget
    assert clock.should_log(2) is False and clock.should_log(4) is True
    assert clock.exhausted(10) and clock.last_status == "no HTTP answer"
    assert clock.reset() == 8 and not clock.ongoing and clock.elapsed(100) == 0


@pytest.mark.parametrize("value", [-1, "soon", None, True, float("nan")])
def test_validate_names_the_field_and_value(value):
    with pytest.raises(SpecError, match="api_outage_timeout"):
        validate("api_outage_timeout", value)
    assert validate("api_outage_timeout", "90") == 90.0


def test_a_two_minute_outage_is_reported_as_two_minutes():
    """Issue 33 item 12: a call that fails only after a minute of its own retries begins the outage when it began
    (the first line says 60 s, not 0 s), and the answer at 120 s ends a 120 s outage (not the 30 s between the
    first and the last failure)."""
    clock = OutageClock(timeout=3600, max_backoff=30, log_interval=180)
    clock.failed(60, "HTTP 503", started=0)  # the first call began at 0 and gave up at 60
    assert clock.should_log(60) and clock.elapsed(60) == 60
    clock.failed(90, "HTTP 503", started=61)  # later calls do not move the start
    assert clock.elapsed(90) == 90 and clock.remaining(90) == 3600 - 90
    assert clock.reset(120) == 120 and not clock.ongoing


def test_the_adapter_measures_an_outage_from_its_first_failing_call(monkeypatch):
    """adapters/kubernetes.py: the sync JobSet API's outage wait logs the outage's real length."""
    import logging

    from mtc_provider.adapters import kubernetes as k8s_adapter
    from mtc_provider.adapters import retry

    now = [1000.0]
    monkeypatch.setattr(k8s_adapter.time, "monotonic", lambda: now[0])
    api = k8s_adapter.KubernetesJobSetApi(lambda: None, outage_timeout=3600, outage_log_interval=180,
                                          sleep=lambda s: now.__setitem__(0, now[0] + s))
    answers = iter([False, False, True])

    def call():
        now[0] += 45  # each call spends 45 s in its own retries before it gives up (or answers)
        if not next(answers):
            raise retry.Retryable("HTTP 503")
        return "ok"

    lines: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: lines.append(record.getMessage())  # Airflow's logging config may not propagate
    monkeypatch.setattr(k8s_adapter.log, "level", logging.INFO)
    k8s_adapter.log.addHandler(handler)
    try:
        assert api._through_outage(call, "get") == "ok"
    finally:
        k8s_adapter.log.removeHandler(handler)
    assert any("unreachable for 45 s" in line for line in lines), lines
    answered = next(line for line in lines if "answers again" in line)
    assert answered == f"Kubernetes API answers again after {now[0] - 1000:.0f} s", lines
