"""Progress lines and XCom figures, and bounded log tails (pure)."""

from __future__ import annotations

import pytest

from mtc_provider.core.measure.progress_report import failed_pod_section, format_duration, progress_report, tail


def test_progress_line_has_step_rate_eta_checkpoint_and_restarts() -> None:
    report = progress_report(step=1200, target_step=5000, steps_per_hour=410.0, newest_checkpoint=1100, restarts=2,
                             attempt=1)
    assert report.line() == ("step 1200 of 5000 (24%), 410 steps/h, ETA 9h16m, newest checkpoint 1100, "
                             "restarts so far 2 (attempt 1)")
    assert report.eta_seconds == pytest.approx(3800 * 3600 / 410)
    xcom = report.to_xcom()
    assert xcom["step"] == 1200 and xcom["percent"] == 24.0 and xcom["restarts"] == 2 and xcom["steps_per_hour"] == 410.0


def test_unknown_step_falls_back_to_the_newest_checkpoint() -> None:
    report = progress_report(None, 1000, 100.0, 300)
    assert report.step == 300 and report.eta_seconds == pytest.approx(7 * 3600)


def test_nothing_known_yet() -> None:
    assert progress_report(None, 1000, None, None).line() == (
        "no step yet, rate unknown, ETA ?, newest checkpoint none yet, restarts so far 0 (attempt 1)")


def test_done_means_eta_zero_and_at_most_100_percent() -> None:
    report = progress_report(1100, 1000, None, 1000)
    assert report.eta_seconds == 0.0 and report.percent == 100.0


@pytest.mark.parametrize("seconds, text", [(None, "?"), (12, "12s"), (250, "4m10s"), (33360, "9h16m"),
                                           (183600, "2d3h"), (-1, "?")])
def test_format_duration(seconds, text) -> None:
    assert format_duration(seconds) == text


def test_tail_is_bounded_by_lines_and_bytes() -> None:
    text = "\n".join(f"line {i}" for i in range(1000))
    assert tail(text, 3) == "line 997\nline 998\nline 999"
    assert tail(text, 100, max_bytes=20) == "line 998\nline 999"  # whole lines only
    assert tail("", 5) == "" and tail(text, 0) == ""


def test_failed_pod_section() -> None:
    lines = failed_pod_section("train-slice-0-1-abcde", "exit 1, Error", "Traceback\nValueError: bad config")
    assert lines[0] == "----- failed pod train-slice-0-1-abcde (exit 1, Error): last 2 log lines -----"
    assert lines[1:3] == ["Traceback", "ValueError: bad config"] and lines[-1] == "----- end of train-slice-0-1-abcde -----"
    assert failed_pod_section("p", "", "")[1] == "(the pod wrote no log)"
