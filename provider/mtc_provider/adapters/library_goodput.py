"""Goodput as MaxText records it: Google's ml-goodput-measurement, read back with its own calculator (I/O only).

MaxText with `enable_goodput_recording=true` (default false) writes goodput events through
`goodput.GoodputRecorder(config.run_name, f"goodput_{config.run_name}", jax.process_index() == 0)` to Cloud Logging
(AI-Hypercomputer/maxtext, `create_goodput_recorder`). The library's `GoodputCalculator(job_name, logger_name)`
reads those entries (`_CloudLogger.read_cloud_logging_entries`: filter `logName`, `severity=INFO`,
`jsonPayload.job_name`; returns the payloads in timestamp order and the last (timestamp, insertId)) and
`get_job_goodput(include_badput_breakdown=True)` answers (goodput %, {BadputType: %}, last productive step)
(ml_goodput_measurement/src/goodput.py @0.2.3).

The library's reader makes its own `google.cloud.logging.Client()` from application default credentials; here the
reader is the library's class with the client made from the Airflow Google connection (so impersonation and a
connection's key file apply), handed to the calculator as its `cloud_logger`, as the library's own tests do.
"""

from __future__ import annotations

import datetime
import tempfile
from typing import Any, Callable, Sequence

from mtc_provider.core.basics.install import install_line

LIBRARY = "ml-goodput-measurement"
INSTALL_HINT = f"{install_line('goodput')} (after make dist)"


def logger_name_for(run_name: str) -> str:
    """MaxText's logger name for a run: `goodput_<run_name>`."""
    return f"goodput_{run_name}"


def connection_reader(job_name: str, logger_name: str, gcp_conn_id: str,
                      impersonation_chain: str | Sequence[str] | None = None):
    """The library's Cloud Logging reader over the Airflow connection's credentials and project (read only)."""
    import google.cloud.logging
    from airflow.providers.google.common.hooks.base_google import GoogleBaseHook
    from ml_goodput_measurement.src.goodput import _CLOUD_LOGGING_DEFAULT_RETENTION, _CloudLogger

    hook = GoogleBaseHook(gcp_conn_id=gcp_conn_id, impersonation_chain=impersonation_chain)
    client = google.cloud.logging.Client(project=hook.project_id, credentials=hook.get_credentials())

    class ConnectionReader(_CloudLogger):  # its filter and paging; not its writer (which needs ADC)
        def __init__(self) -> None:  # noqa: D107 - no super().__init__: that builds an ADC client and a writer
            self.job_name, self.log_name, self.project_id = job_name, logger_name, client.project
            self.logger = client.logger(logger_name)
            self.job_start_time = None
            self.retention_period = _CLOUD_LOGGING_DEFAULT_RETENTION

        def write_cloud_logging_entry(self, entry) -> None:
            raise RuntimeError("the goodput report only reads the run's goodput records")

        def flush(self) -> None:
            return None

    return ConnectionReader()


def library_goodput(job_name: str, logger_name: str | None = None, reader: Any = None,
                    reader_factory: Callable[[str, str], Any] | None = None) -> dict[str, Any]:
    """The library's own figures for `job_name`: goodput (0..1), its badput breakdown (shares of the job's time,
    by the library's BadputType names, lower case), the last productive step. Raises ImportError without the
    library (INSTALL_HINT), ValueError when it has no records for the job."""
    from ml_goodput_measurement import goodput

    logger_name = logger_name or logger_name_for(job_name)
    if reader is None and reader_factory is not None:
        reader = reader_factory(job_name, logger_name)
    with tempfile.TemporaryDirectory(prefix="mtc-goodput-cache-") as cache:
        calculator = goodput.GoodputCalculator(job_name=job_name, logger_name=logger_name, cloud_logger=reader,
                                               cache_dir=cache)
        percent, breakdown, last_step = calculator.get_job_goodput(include_badput_breakdown=True)
    badput: dict[str, Any] = {}
    for kind, value in (breakdown or {}).items():
        name = getattr(kind, "name", str(kind)).lower()
        badput[name] = ({str(k): round(float(v) / 100.0, 6) for k, v in value.items()} if isinstance(value, dict)
                        else round(float(value) / 100.0, 6))
    return {"source": LIBRARY, "job_name": job_name, "logger_name": logger_name,
            "goodput": round(float(percent) / 100.0, 6), "badput": badput, "last_step": last_step,
            "read_at": datetime.datetime.now(datetime.timezone.utc).isoformat()}
