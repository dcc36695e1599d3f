"""Kubernetes API outages, watch timeouts and hung requests (issue #23 items 3-5), with the real clients.

The trigger and the adapters reach the local API server through the "local" connection: the cncf.kubernetes
hooks (AsyncKubernetesHook / KubernetesHook over the home's kubeconfig) and the real kubernetes_asyncio /
kubernetes clients, over HTTP on 127.0.0.1. The server's outage switch (mtc_local/cluster/faults.py)
answers 503 with Retry-After, drops connections, hangs them, and cuts open watches. Clocks are real; the trigger's
budget, backoff and timeouts are made small through its parameters.

Kubernetes behaviour relied on:
- a watch ends normally after its timeoutSeconds; the client resumes from the last resourceVersion
  (https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes);
- 429 and 503 carry Retry-After (https://kubernetes.io/docs/concepts/cluster-administration/flow-control/;
  RFC 9110 section 10.2.3, https://www.rfc-editor.org/rfc/rfc9110#field.retry-after);
- cncf.kubernetes' async client applies a 60 s request timeout unless `_request_timeout` is given, whatever a
  watch's timeoutSeconds says (apache-airflow-providers-cncf-kubernetes kube_client.py `_TimeoutAsyncK8sApiClient`
  and `_get_request_timeout`, the version pinned in uv.lock); GKE's async hook's client has none
  (apache-airflow-providers-google hooks/kubernetes_engine.py `GKEKubernetesAsyncHook._load_config`).
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from tests.support.js_helpers import jobset_body
from mtc_provider.core.attempt.launch_options import ApiPacing, WatchSettings, WatchTimes
from mtc_provider import targets
from mtc_provider.adapters import retry
from mtc_provider.core.attempt.jobset_events import API_UNREACHABLE, ENDED, JobSetEvent
from mtc_provider.triggers.jobset import JobSetTrigger
from tests.doubles.memory_jobset import status_completed, status_running

pytestmark = pytest.mark.timeout(90)


def _trigger(cluster, resource_version: str, api_outage_timeout: float = 60, request_timeout: float = 2):
    times = WatchTimes(poll_interval=0.05, progress_interval=None, api_outage_timeout=api_outage_timeout)
    pacing = ApiPacing(log_interval=0.5, backoff_max=0.05, request_timeout=request_timeout)
    return JobSetTrigger(connection=cluster.connection, namespace="default", name="train",
                         resource_version=resource_version, watch=WatchSettings(times=times, pacing=pacing))


async def _first_event(trigger: JobSetTrigger) -> JobSetEvent:
    async for event in trigger.run():
        return JobSetEvent.from_payload(event.payload)
    raise AssertionError("the trigger ended without an event")


async def _until(predicate, timeout: float = 60.0) -> None:
    """Wait for a condition: a liveness bound (a loaded machine is slow), never what a test measures."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


async def test_api_outage_with_retry_after_is_waited_out_and_the_watch_goes_on(outage_cluster, fast_retries,
                                                                               caplog, capsys, monkeypatch):
    """A 503 outage with Retry-After and cut watches: no ERROR event, the trigger keeps watching and sees the end."""
    monkeypatch.setattr(retry, "ATTEMPTS", 2)  # the adapter's own quick tries, so the trigger's rounds show
    # Whichever layer meets the 503 (the watch's own retries, a poll, or the trigger's outage rounds: which one
    # depends on where the watch was when the outage began), Retry-After must win over the test's short backoff:
    # the adapter caps a Retry-After at MAX_WAIT, so give it room above the 2 s asked for.
    monkeypatch.setattr(retry, "MAX_WAIT", 3.0)
    rv = outage_cluster.put_jobset(jobset_body(), status_running())
    task = asyncio.ensure_future(_first_event(_trigger(outage_cluster, rv)))
    await _until(lambda: outage_cluster.faults.state()["open_watches"] >= 1 or task.done())
    assert not task.done(), task.result()
    outage_cluster.faults.set("unavailable", seconds=8, retry_after=2)  # also cuts the open watch
    await _until(lambda: outage_cluster.faults.current() == "none")
    outage_cluster.set_status("train", status_completed())
    # Back within one capped wait after the outage: far inside api_outage_timeout (60 s), which would end the
    # watch with an api-unreachable event instead.
    event = await asyncio.wait_for(task, 30)
    assert event.kind == ENDED and event.state.phase == "succeeded", event
    captured = capsys.readouterr()
    logs = captured.out + captured.err + caplog.text
    assert "Kubernetes API unreachable for" in logs and "HTTP 503" in logs and "still watching" in logs
    assert "answers again after" in logs
    # Retry-After: 2 honoured: between tries it waits 2 s, not api_backoff_max (0.05 s) nor the adapter's
    # backoff. The server's clock of the faulted requests shows those waits, per caller: the JobSet's own
    # requests (watch, get) apart from the pod listings the trigger also retries while it waits.
    faults = outage_cluster.faults
    at = [t for t, path in zip(faults.faulted_at, faults.faulted_paths) if "/pods" not in path]
    waits = [b - a for a, b in zip(at, at[1:]) if b - a >= 1.8]
    assert len(waits) >= 2, [round(b - a, 2) for a, b in zip(at, at[1:])]


async def test_api_outage_budget_spent_is_api_unreachable_and_the_operator_leaves_the_jobset(
        outage_cluster, fast_retries):
    """Connections dropped for longer than api_outage_timeout: an api-unreachable event naming the API and what
    it answered; the operator then fails the task for good (no Airflow retry spent) without a single request
    (nothing deleted, no attempt closed)."""
    from airflow.sdk.exceptions import AirflowFailException

    from mtc_provider.operators.jobset import JobSetAttemptFailed, MtcJobSetOperator

    rv = outage_cluster.put_jobset(jobset_body(), status_running())
    outage_cluster.faults.set("drop")
    started = time.monotonic()
    event = await asyncio.wait_for(_first_event(_trigger(outage_cluster, rv, api_outage_timeout=1.5)), 30)
    assert event.kind == API_UNREACHABLE, event
    assert time.monotonic() - started >= 1.5
    assert "the local cluster's Kubernetes API" in event.message and "unreachable for" in event.message
    assert "no HTTP answer" in event.message and "api_outage_timeout 2 s" in event.message

    operator = MtcJobSetOperator(task_id="train", slices={"tpu_type": "v5p-8"},
                                 checkpointing={"run_name": "r", "base_output_directory": "gs://b/o", "steps": 10},
                                 workload={"jobset_name": "train", "image": "i"}, target={"kind": "local"})
    before = outage_cluster.faults.state()["faulted"]
    with pytest.raises(AirflowFailException) as failed:
        operator.execute_complete({"ti": None}, event.to_payload())
    assert not isinstance(failed.value, JobSetAttemptFailed)
    assert "unreachable" in str(failed.value) and "reattach" in str(failed.value)
    assert outage_cluster.faults.state()["faulted"] == before  # not one request: no delete, no lock write
    outage_cluster.faults.set("none")
    assert outage_cluster.has_jobset("train")


def test_api_outage_sync_requests_wait_it_out_then_fail_bounded(outage_cluster, fast_retries, caplog, capfd,
                                                                monkeypatch):
    """The operator's synchronous side (list, submit, reattach, the run lock) rides out an outage the same way,
    bounded by its outage budget."""
    monkeypatch.setattr(retry, "ATTEMPTS", 1)  # no quick retries: the outage wait alone rides it out
    outage_cluster.put_jobset(jobset_body(), status_running())
    api = targets.jobset_api(outage_cluster.connection, request_timeout=2, outage_timeout=30)
    api.outage_max_backoff, api.outage_log_interval = 0.05, 0.5
    api.get("default", "train")  # the first client pays for imports and the hook's set-up, before the fault
    outage_cluster.faults.set("unavailable", seconds=3, retry_after=1)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="mtc_provider.adapters.kubernetes"):
        assert api.get("default", "train")["metadata"]["name"] == "train"
    assert time.monotonic() - started >= 2.5 and outage_cluster.faults.state()["faulted"] >= 2
    captured = capfd.readouterr()
    logs = captured.out + captured.err + caplog.text  # Airflow routes logging through structlog
    assert "Kubernetes API unreachable for" in logs and "HTTP 503" in logs

    outage_cluster.faults.set("drop")
    api.outage_timeout = 1.0
    with pytest.raises(retry.ApiUnreachable) as unreachable:
        api.list("default", "app=train")
    assert "no HTTP answer" in str(unreachable.value)


async def test_watch_timeout_quiet_watch_outlives_the_client_default(outage_cluster, fast_retries, monkeypatch):
    """A quiet watch lasts its timeoutSeconds and ends normally, although the cncf client's request timeout
    (60 s, scaled down here to 1 s) is shorter: the watch is given timeoutSeconds + a margin, never polling.

    Load-proof: the server's own times of the watches it opened are compared, never a fixed sleep: each new watch
    opens only after the previous one lasted its timeoutSeconds (a client cutting it at 1 s would reopen sooner)."""
    from airflow.providers.cncf.kubernetes import kube_client

    # The cncf default (60 s), scaled as watch_timeout is; older cncf providers (10.12) have no such default.
    monkeypatch.setattr(kube_client, "API_TIMEOUT", 1, raising=False)
    opened: list[float] = []
    watch_opened = outage_cluster.faults.watch_opened

    def record(sock):
        opened.append(time.monotonic())
        watch_opened(sock)

    monkeypatch.setattr(outage_cluster.faults, "watch_opened", record)
    rv = outage_cluster.put_jobset(jobset_body(), status_running())
    api = targets.async_jobset_api(outage_cluster.connection, poll_interval=0.05)
    api.watch_timeout = 2  # the server ends each watch after 2 s (300 s in production)
    events = []

    async def follow():
        async for event in api.watch("default", "train", rv):
            events.append(event)
            return

    task = asyncio.ensure_future(follow())
    await _until(lambda: len(opened) >= 3)  # quiet: nothing changes; two watches end normally and a third is open
    assert not api.polling
    assert api.answers >= 3, api.answers
    gaps = [round(b - a, 2) for a, b in zip(opened, opened[1:3])]
    assert all(gap >= api.watch_timeout - 0.1 for gap in gaps), gaps
    outage_cluster.set_status("train", status_completed())
    await asyncio.wait_for(task, 30)
    assert events[0].obj["status"]["terminalState"] == "Completed"


async def test_request_timeout_hung_requests_are_bounded(outage_cluster, fast_retries):
    """A connection that is accepted and never answered (half-open) ends each request after request_timeout.

    Load-proof: the hang lasts until the test clears it, so a request that returns at all was ended by the client;
    each call makes exactly its ATTEMPTS tries (the server counts them). Without request_timeout the sync client
    would wait forever and the async one 60 s a try (cncf's default): the test's own timeout (90 s) fails it."""
    outage_cluster.put_jobset(jobset_body(), status_running())
    # Warm up (imports, the hooks' set-up) with answered requests, so only the hang is timed below.
    await targets.async_jobset_api(outage_cluster.connection).get("default", "train")
    targets.jobset_api(outage_cluster.connection).get("default", "train")
    faults = outage_cluster.faults
    faults.set("hang")  # until cleared
    async_api = targets.async_jobset_api(outage_cluster.connection, request_timeout=0.3)
    tries = [faults.state()["faulted"]]
    with pytest.raises(retry.Retryable) as hung:
        await async_api.get("default", "train")
    assert hung.value.status == 0  # no HTTP answer
    tries.append(faults.state()["faulted"])
    with pytest.raises(retry.Retryable):
        await async_api.list_pods("default", "train")
    tries.append(faults.state()["faulted"])
    sync_api = targets.jobset_api(outage_cluster.connection, request_timeout=0.3)
    with pytest.raises(retry.Retryable):
        sync_api.get("default", "train")
    tries.append(faults.state()["faulted"])
    assert faults.current() == "hang"  # the server never let go: the client's request_timeout ended each try
    # each call tried, and no more than its ATTEMPTS (the server counts a try when it reads it: one may lag)
    assert all(b > a for a, b in zip(tries, tries[1:])) and tries[-1] - tries[0] <= 3 * retry.ATTEMPTS, tries


async def test_request_timeout_trigger_rides_out_a_hanging_api(outage_cluster, fast_retries):
    """The API hangs for a while (requests accepted, never answered), then answers: the trigger keeps watching."""
    rv = outage_cluster.put_jobset(jobset_body(), status_running())
    task = asyncio.ensure_future(_first_event(_trigger(outage_cluster, rv, request_timeout=0.3)))
    await _until(lambda: outage_cluster.faults.state()["open_watches"] >= 1)
    outage_cluster.faults.set("hang", seconds=2)
    await _until(lambda: outage_cluster.faults.current() == "none")
    outage_cluster.set_status("train", status_completed())
    event = await asyncio.wait_for(task, 30)
    assert event.kind == ENDED, event


def test_api_outage_during_a_synchronous_try_fails_for_good_without_spending_a_retry(outage_cluster, fast_retries,
                                                                                      tmp_path):
    """The operator's own requests (the run lock, the listing, submit) wait out an outage for api_outage_timeout;
    then the try fails for good (AirflowFailException: Airflow's retries stay for real resubmissions)."""
    from airflow.sdk.exceptions import AirflowFailException
    from tests.support.js_helpers import FakeTI, launch, run_try

    from mtc_provider.operators.jobset import JobSetAttemptFailed

    outage_cluster.faults.set("unavailable", retry_after=0)
    op = launch(str(tmp_path), target={"kind": "local", "home": str(outage_cluster.home)}, api_outage_timeout=1)
    started = time.monotonic()
    with pytest.raises(AirflowFailException) as failed:
        run_try(op, FakeTI(try_number=1))
    assert time.monotonic() - started >= 1
    assert not isinstance(failed.value, JobSetAttemptFailed)
    assert "unreachable for" in str(failed.value) and "HTTP 503" in str(failed.value)
    assert "no Airflow retry is spent" in str(failed.value)


def test_api_outage_timeout_must_be_seconds(tmp_path):
    from airflow.sdk.exceptions import AirflowFailException
    from tests.support.js_helpers import FakeTI, launch, run_try

    with pytest.raises(AirflowFailException, match="api_outage_timeout: 'soon' is not allowed"):
        run_try(launch(str(tmp_path), api_outage_timeout="soon"), FakeTI())


class _TI:
    """The XComs of one DAG run's tasks, as the launch task pushes and the teardown pulls them."""

    dag_id, run_id, task_id = "dag", "run-1", "teardown"

    def __init__(self, xcoms: dict) -> None:
        self.xcoms = xcoms

    def xcom_push(self, key: str, value: object) -> None:
        self.xcoms[("train", key)] = value

    def xcom_pull(self, task_ids: str, key: str) -> object:
        return self.xcoms.get((task_ids, key))


async def test_api_outage_last_try_the_teardown_keeps_the_training_jobset(outage_cluster, fast_retries, capfd):
    """The issue's last-try case: the launch task fails for an outage while the JobSet trains on; the teardown
    that follows must not end the run (design: only an attempt's own end, the teardown after the run ended, or a
    confirmed user action delete a JobSet). Without the outage, the same teardown deletes it (the control)."""
    from airflow.sdk.exceptions import AirflowFailException

    from mtc_provider.core.basics import labels as L
    from mtc_provider.operators.jobset import MtcDeleteJobSetOperator, MtcJobSetOperator, OrchestratorFault

    body = jobset_body()
    body["metadata"]["labels"] = L.run_labels("dag", "run-1", "train", "r")
    rv = outage_cluster.put_jobset(body, status_running())
    outage_cluster.faults.set("drop")
    event = await asyncio.wait_for(_first_event(_trigger(outage_cluster, rv, api_outage_timeout=1.0)), 30)
    outage_cluster.faults.set("none")
    xcoms: dict = {}
    operator = MtcJobSetOperator(task_id="train", slices={"tpu_type": "v5p-8"},
                                 checkpointing={"run_name": "r", "base_output_directory": "gs://b/o", "steps": 10},
                                 workload={"jobset_name": "train", "image": "i"}, target={"kind": "local"})
    with pytest.raises(AirflowFailException) as failed:
        operator.execute_complete({"ti": _TI(xcoms)}, event.to_payload())
    assert isinstance(failed.value, OrchestratorFault)

    teardown = MtcDeleteJobSetOperator(task_id="teardown", target=dict(outage_cluster.connection),
                                       run_name="r", launch_task_id="train")
    capfd.readouterr()
    assert teardown.execute({"ti": _TI(xcoms)}) == []
    assert outage_cluster.has_jobset("train")
    logged = "".join(capfd.readouterr())  # Airflow's structlog writes the task log lines to the output
    assert "teardown keeps the JobSets of run r" in logged and "not the run's" in logged

    assert teardown.execute({"ti": _TI({})}) == ["train"]  # a run that really ended: the teardown deletes
