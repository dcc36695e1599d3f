"""An outage is said in a few lines, not one warning per retry (issue #33 item 8: about 52 tenacity `Retrying`
warnings in 3 minutes were seen). The sync api reaches the local API server in this process, whose outage switch
answers 503 with Retry-After (tests/doubles/js_outage.py; Kubernetes' flow control:
https://kubernetes.io/docs/concepts/cluster-administration/flow-control/), through the real `kubernetes` client."""

from __future__ import annotations

import logging

from mtc_provider import targets
from mtc_provider.adapters import retry
from tests.doubles.memory_jobset import status_running
from tests.support.jobset_fixtures import outage_cluster  # noqa: F401 - fixture
from tests.support.js_airflow_db import enable_provider_loggers
from tests.support.js_helpers import jobset_body


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_a_four_second_outage_is_said_once_not_once_per_retry(outage_cluster, monkeypatch):  # noqa: F811
    enable_provider_loggers()
    seen = _Records()  # on the adapters' own loggers: whatever Airflow's logging set-up did to propagation
    for name in ("mtc_provider.adapters.kubernetes", "mtc_provider.adapters.retry"):
        logger = logging.getLogger(name)
        monkeypatch.setattr(logger, "level", logging.DEBUG)
        monkeypatch.setattr(logger, "handlers", [*logger.handlers, seen])
    monkeypatch.setattr(retry, "INITIAL_WAIT", 0.05)
    monkeypatch.setattr(retry, "MAX_WAIT", 0.1)
    outage_cluster.put_jobset(jobset_body(), status_running())
    api = targets.jobset_api(outage_cluster.connection, request_timeout=2, outage_timeout=60)
    api.outage_max_backoff, api.outage_log_interval = 0.2, 180.0
    api.get("default", "train")  # connected before the outage (the kubeconfig is read, the client imported)
    outage_cluster.faults.set("unavailable", seconds=4, retry_after=0)
    assert api.get("default", "train")["metadata"]["name"] == "train"
    faulted = outage_cluster.faults.state()["faulted"]
    warnings = [r.getMessage() for r in seen.records if r.levelno >= logging.WARNING]
    assert faulted >= 10, faulted  # it did retry many times ...
    assert len(warnings) == 1 and "Kubernetes API unreachable" in warnings[0], warnings  # ... and said so once
    assert any("answers again" in r.getMessage() for r in seen.records)
