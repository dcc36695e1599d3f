"""The goodput report beside ml-goodput-measurement's own figures (issue #26).

MaxText records goodput with the library's `GoodputRecorder(run_name, f"goodput_{run_name}", ...)` into Cloud
Logging; the report reads it back with the library's `GoodputCalculator`. The Cloud Logging side is a double that
keeps what it is given and answers reads as the library's reader does (`_CloudLogger.read_cloud_logging_entries`:
the payloads in timestamp order, after `start_time`, up to `end_time`, and the last (timestamp, id); the library's
own tests use the same double, `MockCloudLogger` in ml_goodput_measurement/tests/goodput_test.py). The entries are
written by the library's own recorder, so their shape is the library's, and the figures are its calculator's.
"""

from __future__ import annotations

import datetime as dt
import os

import pytest

pytest.importorskip("ml_goodput_measurement")  # the `goodput` extra (installed by `make venv`: --all-extras)

from ml_goodput_measurement import goodput  # noqa: E402

from mtc_provider.operators.goodput import GoodputReportOperator  # noqa: E402

RUN = "llama-run"


class RecordedCloudLogging:
    """The library's Cloud Logging reader and writer, in memory (as its MockCloudLogger)."""

    def __init__(self, job_name: str, logger_name: str) -> None:
        self.job_name, self.logger_name, self.entries, self.reads = job_name, logger_name, [], 0

    def write_cloud_logging_entry(self, entry) -> None:
        from ml_goodput_measurement.src.goodput_utils import get_timestamp_from_log_entry

        if entry is not None and entry.get("job_name") == self.job_name:
            self.entries.append((get_timestamp_from_log_entry(entry), dict(entry)))

    def flush(self) -> None:
        return None

    def read_cloud_logging_entries(self, start_time=None, end_time=None, last_entry_info=None):
        self.reads += 1
        chosen = sorted((e for e in self.entries if (start_time is None or e[0] > start_time)
                         and (end_time is None or e[0] <= end_time)), key=lambda e: e[0])
        last = (chosen[-1][0], str(len(chosen))) if chosen else (None, None)
        return [payload for _, payload in chosen], last


def record_a_disrupted_run(logging: RecordedCloudLogging, t0: dt.datetime) -> None:
    """What MaxText records: start-up, 10 steps of 10 s, a disruption after step 9 (last checkpoint at step 5),
    a restart that redoes steps 6..9 and trains to step 14, the end."""
    recorder = goodput.GoodputRecorder(RUN, f"goodput_{RUN}", logging_enabled=True, cloud_logger=logging)
    at = lambda s: t0 + dt.timedelta(seconds=s)  # noqa: E731
    recorder.record_job_start_time(at(0))
    recorder.record_tpu_init_start_time(at(0))
    recorder.record_tpu_init_end_time(at(10))
    recorder.record_training_preparation_start_time(at(10))
    recorder.record_training_preparation_end_time(at(20))
    for step in range(10):
        recorder.record_step_start_time(step, at(20 + 10 * step))
    recorder.record_job_start_time(at(140))  # the restarted job (after 20 s of infrastructure recovery)
    recorder.record_tpu_init_start_time(at(140))
    recorder.record_tpu_init_end_time(at(145))
    for step in range(6, 15):
        recorder.record_step_start_time(step, at(150 + 10 * (step - 6)))
    recorder.record_job_end_time(at(240))


class LogLines:
    """The operator's log lines (structlog's stream depends on earlier tests' set-up: read them here)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def _record(self, message: str, *args, **_kwargs) -> None:
        self.lines.append(message % args if args else message)

    debug = info = warning = error = exception = _record

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def recording(operator) -> LogLines:
    operator._cached_logger = log = LogLines()  # the DAG node keeps its logger there (GenericDAGNode.log)
    return log


def finalized(checkpoints, step: int, at: float) -> None:
    (checkpoints / str(step)).mkdir(parents=True)
    marker = checkpoints / str(step) / "commit_success.txt"
    marker.write_text("")
    os.utime(marker, (at, at))


def test_the_report_shows_the_librarys_badput_beside_ours(tmp_path):
    t0 = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)
    logging = RecordedCloudLogging(RUN, f"goodput_{RUN}")
    record_a_disrupted_run(logging, t0)
    checkpoints = tmp_path / RUN / "checkpoints"
    start = t0.timestamp()
    finalized(checkpoints, 5, start + 80)
    finalized(checkpoints, 14, start + 240)
    attempts = [{"start": start, "end": start + 120, "outcome": "disrupted"},
                {"start": start + 140, "end": start + 240, "outcome": "finished"}]
    asked = []
    operator = GoodputReportOperator(
        task_id="goodput", checkpoint_dir=str(checkpoints), attempts=attempts, chart_path=str(tmp_path / "g.png"),
        goodput_recording="true",  # as a rendered template gives it
        goodput_reader_factory=lambda job, logger: asked.append((job, logger)) or logging)
    log = recording(operator)
    result = operator.execute({"run_id": "r1"})
    assert asked == [(RUN, f"goodput_{RUN}")]  # MaxText's job name (the run folder) and logger name
    library = result["library"]
    assert library["source"] == "ml-goodput-measurement" and library["last_step"] == 14
    assert 0 < library["goodput"] < 1 and logging.reads >= 1
    badput = library["badput"]
    assert badput["tpu_initialization"] > 0 and badput["training_prep"] > 0
    assert badput["wasted_progress_from_disruption"] > 0 and badput["infrastructure_recovery_from_disruption"] > 0
    shares = [v for v in badput.values() if isinstance(v, float)]
    assert library["goodput"] + sum(shares) == pytest.approx(1.0, abs=0.02)  # shares of the job's whole time
    assert 0 < result["goodput"] < 1 and result["source"] == "checkpoint commit times"  # ours, unchanged
    text = log.text
    assert "(this provider's, from checkpoint commit times)" in text
    assert "(ml-goodput-measurement's, from MaxText's own records, logger goodput_llama-run" in text


def test_off_by_default_and_a_failed_read_is_a_warning(tmp_path):
    checkpoints = tmp_path / RUN / "checkpoints"
    finalized(checkpoints, 5, 1000.0)
    finalized(checkpoints, 10, 2000.0)
    plain = GoodputReportOperator(task_id="g", checkpoint_dir=str(checkpoints), chart_path=str(tmp_path / "a.png"),
                                  goodput_reader_factory=lambda job, logger: pytest.fail("read while off"))
    assert "library" not in plain.execute({"run_id": "r"})
    empty = GoodputReportOperator(task_id="g", checkpoint_dir=str(checkpoints), chart_path=str(tmp_path / "b.png"),
                                  goodput_recording=True,
                                  goodput_reader_factory=lambda job, logger: RecordedCloudLogging(job, logger))
    log = recording(empty)
    result = empty.execute({"run_id": "r"})
    assert "library" not in result and "could not read MaxText's goodput records of llama-run" in log.text


def test_goodput_recording_names_a_bad_value(tmp_path):
    from mtc_provider.core.basics.errors import SpecError

    op = GoodputReportOperator(task_id="g", checkpoint_dir=str(tmp_path / "c"), goodput_recording="maybe")
    with pytest.raises(SpecError, match="goodput_recording"):
        op.library_report()


def test_the_connection_reader_queries_as_the_library_does(monkeypatch):
    """The reader over the Airflow connection (no ADC): the library's own filter, on the connection's project."""
    import json

    from mtc_provider.adapters.library_goodput import connection_reader

    monkeypatch.setenv("AIRFLOW_CONN_GOODPUT_TEST", json.dumps(
        {"conn_type": "google_cloud_platform", "extra": {"project": "my-project", "is_anonymous": True}}))
    reader = connection_reader(RUN, f"goodput_{RUN}", "goodput_test")
    query = reader._get_filter_msg(None, dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc))
    assert f'logName="projects/my-project/logs/goodput_{RUN}"' in query
    assert f'jsonPayload.job_name="{RUN}"' in query and "severity=INFO" in query
    with pytest.raises(RuntimeError, match="only reads"):
        reader.write_cloud_logging_entry({"job_name": RUN})
