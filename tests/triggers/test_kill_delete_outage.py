"""A confirmed user action's delete waits out a short Kubernetes API outage (issue #33 item 6), with the real
clients against the local API server and its outage switch (tests/doubles/js_outage.py, mtc_local/cluster/faults.py).

Kubernetes behaviour relied on: while the API server cannot serve it answers 503 with Retry-After
(https://kubernetes.io/docs/concepts/cluster-administration/flow-control/; RFC 9110 section 10.2.3). Airflow gives a
trigger's on_kill `[triggerer] on_kill_timeout` seconds (30 by default; airflow-core jobs/triggerer_job_runner.py
`_ON_CANCEL_TIMEOUT`). The task instance's state is Airflow's answer through the Task SDK; here it is given as a
user's "Mark failed" leaves it (state failed), since no triggerer runs.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from mtc_provider.core.attempt.launch_options import ApiPacing, WatchSettings, WatchTimes
from mtc_provider.adapters import task_state
from mtc_provider.core.attempt.ownership import TaskLookup
from mtc_provider.triggers.jobset import JobSetTrigger
from tests.doubles.memory_jobset import status_running
from tests.support.jobset_fixtures import fast_retries, outage_cluster  # noqa: F401 - fixtures
from tests.support.js_helpers import jobset_body

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def marked_failed(monkeypatch):
    async def lookup(owner):
        return TaskLookup(True, "failed"), ""

    monkeypatch.setattr(task_state, "atry_lookup", lookup)


def _trigger(cluster) -> JobSetTrigger:
    trigger = JobSetTrigger(connection=cluster.connection, namespace="default", name="train",
                            watch=WatchSettings(times=WatchTimes(poll_interval=0.05),
                                                pacing=ApiPacing(request_timeout=2)))
    trigger.task_instance = SimpleNamespace(dag_id="d", run_id="r", task_id="train", map_index=-1, try_number=1)
    return trigger


async def test_a_mark_failed_during_a_503_blip_still_deletes(outage_cluster, fast_retries, marked_failed,  # noqa: F811
                                                            capsys):
    outage_cluster.put_jobset(jobset_body(), status_running())
    outage_cluster.faults.set("unavailable", seconds=6, retry_after=1)
    started = time.monotonic()
    await _trigger(outage_cluster).on_kill()
    assert not outage_cluster.has_jobset("train"), "the delete gave up inside a 6 s blip"
    assert time.monotonic() - started >= 5  # it was answered only after the blip
    assert "could not delete" not in capsys.readouterr().out


async def test_an_outage_longer_than_on_kill_timeout_hands_the_delete_to_the_teardown(  # noqa: F811
        outage_cluster, fast_retries, marked_failed, monkeypatch, capsys):
    monkeypatch.setenv("AIRFLOW__TRIGGERER__ON_KILL_TIMEOUT", "8")  # 3 s for the delete after the 5 s margin
    outage_cluster.put_jobset(jobset_body(), status_running())
    outage_cluster.faults.set("unavailable", seconds=30, retry_after=1)
    await _trigger(outage_cluster).on_kill()
    assert outage_cluster.faults.current() == "unavailable"  # it gave up while the outage went on
    outage_cluster.faults.set("none")
    assert outage_cluster.has_jobset("train")
    out = capsys.readouterr().out
    assert "could not delete JobSet default/train for the confirmed user action (" in out
    assert "The run's teardown" in out and "kubectl delete jobset -n default train" in out
