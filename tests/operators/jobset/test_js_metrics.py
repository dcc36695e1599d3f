"""Metrics (issue #26) through Airflow's own Stats to a real UDP StatsD listener on 127.0.0.1.

Airflow's StatsD logger (`[metrics] statsd_on`, airflow/_shared/observability/metrics/statsd_logger.py and
stats_utils.get_stats_factory, the pinned apache-airflow) sends each metric as one datagram in the StatsD line
protocol, `<prefix>.<name>:<value>|c|g|ms` (https://github.com/statsd/statsd/blob/master/docs/metric_types.md);
plain StatsD drops tags, so with `legacy_names_on` (its default) each metric comes once more with dag_id and
task_id in its name. Airflow builds its backend once per process, lazily (stats._get_backend), and each process
initializes its own copy of the Stats module: the triggerer airflow-core's (TriggererJobRunner._execute), a
worker the task SDK's (task_runner.main). The test does the same, in that order, on fresh modules.

The trigger is the real one, against the local API server in this process (js_outage.py) through the real
kubernetes_asyncio client: an in-cluster restart, checkpoint progress, a Kubernetes API outage (503), then a stall.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from types import SimpleNamespace

import pytest

from tests.support.js_helpers import FakeTI, ckpt_dir, finalize, jobset_body, launch, reach, run_try
from mtc_provider.core.attempt.launch_options import ApiPacing, WatchSettings, WatchTimes
from mtc_provider.adapters import metrics, retry
from mtc_provider.core.attempt.jobset_events import STALLED, JobSetEvent
from mtc_local.cluster.resources import PODS
from mtc_provider.operators.jobset import JobSetAttemptFailed
from mtc_provider.triggers.jobset import JobSetTrigger
from tests.doubles.memory_jobset import status_completed, status_failed, status_restarting, status_running

pytestmark = pytest.mark.timeout(90)

DAG_ID, TASK_ID, RUN_NAME = "metrics_dag", "train", "llama-run"


class StatsdListener:
    """A StatsD server's receiving end: every datagram on a UDP socket, split into (name, value, type)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65535)
            except socket.timeout:
                continue
            self.lines.extend(data.decode().splitlines())  # a pipeline packs several lines in one datagram

    def metrics(self) -> list[tuple[str, float, str]]:
        out = []
        for line in list(self.lines):
            name, rest = line.split(":", 1)
            value, kind = rest.split("|")[:2]
            out.append((name, float(value), kind))
        return out

    def named(self, name: str) -> list[tuple[float, str]]:
        return [(value, kind) for n, value, kind in self.metrics() if n == name]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@pytest.fixture
def statsd(monkeypatch):
    from airflow._shared.observability.metrics import stats as core_stats
    from airflow.sdk._shared.observability.metrics import stats as sdk_stats

    listener = StatsdListener()
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_HOST", "127.0.0.1")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PORT", str(listener.port))
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PREFIX", "airflow")
    for module in (core_stats, sdk_stats):  # fresh, uninitialized modules; restored after the test
        for attr in ("_factory", "_backend", "_export_legacy_names"):
            monkeypatch.setattr(module, attr, getattr(module, attr))
        module._factory = module._backend = None
    yield listener
    listener.stop()


def _initialize_like(process: str) -> None:
    """What the triggerer (airflow-core's Stats) or the task runner (the task SDK's) does at start."""
    if process == "triggerer":  # airflow/jobs/triggerer_job_runner.py TriggererJobRunner._execute
        from airflow._shared.observability.metrics import stats
        from airflow.observability.metrics import stats_utils
    else:  # airflow/sdk/execution_time/task_runner.py main
        from airflow.sdk._shared.observability.metrics import stats
        from airflow.sdk.observability.metrics import stats_utils
    stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=True)


def _finalize(checkpoints, step: int, at: float) -> None:
    """A finalized step as the local store lists it: `<step>/commit_success.txt`, committed (mtime) at `at`."""
    import os

    (checkpoints / str(step)).mkdir(parents=True, exist_ok=True)
    marker = checkpoints / str(step) / "commit_success.txt"
    marker.write_text("")
    os.utime(marker, (at, at))


def _running_pod() -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "train-slice-0-0", "namespace": "default",
                         "labels": {"jobset.sigs.k8s.io/jobset-name": "train"}},
            "status": {"phase": "Running"}}


async def _until(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


async def test_metrics_reach_a_real_statsd_listener(statsd, outage_cluster, fast_retries, tmp_path, monkeypatch):
    monkeypatch.setattr(retry, "ATTEMPTS", 2)  # the adapter's own quick tries, so the trigger's outage rounds show
    _initialize_like("triggerer")
    checkpoints = tmp_path / "run" / "checkpoints"
    t0 = time.time()
    _finalize(checkpoints, 100, at=t0 - 36)
    outage_cluster.store.put(PODS, _running_pod())
    rv = outage_cluster.put_jobset(jobset_body(), status_running())
    trigger = JobSetTrigger(connection=outage_cluster.connection, namespace="default", name="train",
                            resource_version=rv, checkpoint_dir=str(checkpoints),
                            extra={"target_step": 1000, "run_name": RUN_NAME, "attempt": 1},
                            watch=WatchSettings(
                                times=WatchTimes(poll_interval=0.05, progress_interval=0.2, api_outage_timeout=60),
                                stall_timeout=4, pacing=ApiPacing(log_interval=0.5, backoff_max=0.05,
                                                                  request_timeout=2)))
    trigger.task_instance = SimpleNamespace(dag_id=DAG_ID, task_id=TASK_ID, id=None)  # as the triggerer sets it

    async def first_event() -> JobSetEvent:
        async for event in trigger.run():
            return JobSetEvent.from_payload(event.payload)
        raise AssertionError("the trigger ended without an event")

    started = time.monotonic()
    task = asyncio.ensure_future(first_event())
    await _until(lambda: (trigger.last_progress or {}).get("newest_checkpoint") == 100)
    outage_cluster.set_status("train", status_restarting(restarts=1))
    await _until(lambda: statsd.named("airflow.mtc.in_cluster_restarts"))
    outage_cluster.set_status("train", status_running(restarts=1))
    _finalize(checkpoints, 200, at=t0)  # 100 steps in 36 s: 10000 steps/h
    await _until(lambda: (trigger.last_progress or {}).get("newest_checkpoint") == 200)
    outage_cluster.faults.set("unavailable", seconds=1.5, retry_after=0)  # also cuts the open watch
    event = await asyncio.wait_for(task, 40)  # nothing newer than step 200: stalled after 4 s
    took = time.monotonic() - started
    assert event.kind == STALLED, event

    # The operator's side, in a worker: the task SDK's Stats. A resubmission 12.5 s after the previous attempt's end.
    _initialize_like("worker")
    run_tags = metrics.tags(DAG_ID, TASK_ID, RUN_NAME, "local")
    metrics.attempt_submitted(run_tags, [{"end": 1000.0}, {"end": None}], created_at=1012.5)
    from mtc_provider.operators.goodput import GoodputReportOperator

    attempts = [{"start": t0 - 36, "end": t0 - 20, "outcome": "disrupted"}, {"start": t0 - 18, "end": t0,
                                                                            "outcome": "finished"}]
    report = GoodputReportOperator(task_id="goodput", checkpoint_dir=str(checkpoints), attempts=attempts,
                                   chart_path=str(tmp_path / "g.png")).execute(
        {"run_id": "r1", "ti": SimpleNamespace(dag_id=DAG_ID, xcom_push=lambda **_: None)})
    await _until(lambda: statsd.named(f"airflow.mtc.goodput.{DAG_ID}.goodput"), timeout=5)

    # Tagged names (sent with tags to Datadog/InfluxDB/OpenTelemetry) and, for plain StatsD, dag_id.task_id in name.
    legacy = f".{DAG_ID}.{TASK_ID}"
    assert statsd.named("airflow.mtc.in_cluster_restarts") == [(1.0, "c")]
    assert statsd.named(f"airflow.mtc.in_cluster_restarts{legacy}") == [(1.0, "c")]
    rates = statsd.named(f"airflow.mtc.steps_per_hour{legacy}")
    assert rates and {kind for _, kind in rates} == {"g"} and rates[-1][0] == pytest.approx(10000.0, abs=1)
    since = [value for value, kind in statsd.named("airflow.mtc.seconds_since_checkpoint") if kind == "g"]
    assert since and 0 <= since[-1] <= time.time() - t0 + 1  # seconds since step 200's commit, at the last line
    assert statsd.named("airflow.mtc.api_outages") == [(1.0, "c")]  # one outage, however many failed rounds
    outage_seconds = statsd.named("airflow.mtc.api_outage_seconds")
    assert outage_seconds and all(kind == "g" and 0 <= value < 10 for value, kind in outage_seconds)
    assert statsd.named("airflow.mtc.stalls") == [(1.0, "c")]
    assert statsd.named(f"airflow.mtc.stalls{legacy}") == [(1.0, "c")]
    assert statsd.named("airflow.mtc.attempts") == [(1.0, "c")]
    assert statsd.named(f"airflow.mtc.resubmission_latency{legacy}") == [(12500.0, "ms")]
    assert statsd.named(f"airflow.mtc.goodput.{DAG_ID}.goodput") == [(pytest.approx(report["goodput"]), "g")]
    assert 0 < report["goodput"] <= 1
    assert took < 30, took


def test_plain_statsd_names_keep_their_hierarchy_and_metrics_never_raise(statsd):
    """A task in a task group (`group.train`) goes into the name as `group__train`, as Airflow's legacy names do
    (stats._get_legacy_stat_name_and_tags); a backend that fails costs a warning, never the task."""
    _initialize_like("worker")
    metrics.stalled(metrics.tags("d", "group.train", "r", "gke"))
    deadline = time.monotonic() + 5
    while len(statsd.lines) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sorted(n for n, _, _ in statsd.metrics()) == ["airflow.mtc.stalls", "airflow.mtc.stalls.d.group__train"]

    from airflow.sdk._shared.observability.metrics import stats as sdk_stats

    def broken():
        raise RuntimeError("no backend")

    sdk_stats.initialize(factory=broken, export_legacy_names=True)
    metrics.stalled(metrics.tags("d", "t"))  # no exception


def test_resubmission_sends_attempts_and_its_latency_from_the_operator(statsd, cluster, tmp_path):
    """Two tries of the real launch operator (synchronous path, in-memory cluster): attempt 1 restarts once in the
    cluster then fails retryably at step 20; attempt 2 is timed from attempt 1's recorded end to its creation."""
    _initialize_like("worker")
    # step 20 exists before attempt 1, which ends there: no progress, so a retry is spent (an attempt that progressed
    # is followed in the same try: tests/operators/jobset/test_js_interruptions.py)
    finalize(ckpt_dir(tmp_path), 20)
    cluster.plan([status_running(), status_restarting(restarts=1), reach(tmp_path, 20, status_failed(restarts=1))],
                 [status_running(), reach(tmp_path, 100, status_completed())])
    with pytest.raises(JobSetAttemptFailed):
        run_try(launch(str(tmp_path)), FakeTI(dag_id=DAG_ID, try_number=1))
    ended = time.time()
    time.sleep(0.3)  # Airflow's retry_delay, shortened
    assert run_try(launch(str(tmp_path)), FakeTI(dag_id=DAG_ID, try_number=2))["last_step"] == 100
    took = time.time() - ended
    deadline = time.monotonic() + 5
    while not statsd.named(f"airflow.mtc.resubmission_latency.{DAG_ID}.{TASK_ID}") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert statsd.named(f"airflow.mtc.attempts.{DAG_ID}.{TASK_ID}") == [(1.0, "c"), (1.0, "c")]
    [(latency, kind)] = statsd.named("airflow.mtc.resubmission_latency")
    assert kind == "ms" and 300 <= latency <= took * 1000, (latency, took)
    assert statsd.named("airflow.mtc.in_cluster_restarts") == [(1.0, "c")]
