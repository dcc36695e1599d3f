"""The outage budget (core.outage): backoff capped, Retry-After honoured (RFC 9110 section 10.2.3), bounded."""

from __future__ import annotations

import pytest

from mtc_provider.core.errors import SpecError
from mtc_provider.core.outage import RETRY_AFTER_CAP, OutageClock, validate


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
