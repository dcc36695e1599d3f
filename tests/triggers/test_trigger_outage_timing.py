"""The trigger times an outage of the Kubernetes API from its first failing call to the first answer (issue #33
item 12: a 2-minute outage was logged as "unreachable for 0 s" and "answers again after 32 s").

The real trigger watches with the real `kubernetes_asyncio` client the local API server in this process, whose
outage switch answers 503 (with Retry-After, as the API server does while it cannot serve:
https://kubernetes.io/docs/concepts/cluster-administration/flow-control/) and cuts the open watch, as an outage does
(tests/doubles/js_outage.py, mtc_local/cluster/faults.py). The watch had been quiet for a while before the outage:
its call started long before anything failed, and the adapter's own bounded retries took seconds before they
gave up; neither is part of the outage.
"""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from mtc_provider.core.attempt.launch_options import ApiPacing, WatchSettings, WatchTimes
from mtc_provider.adapters import retry
from mtc_provider.triggers.jobset import JobSetTrigger
from tests.doubles.memory_jobset import status_running
from tests.support.jobset_fixtures import outage_cluster  # noqa: F401 - fixture
from tests.support.js_airflow_db import file_logger
from tests.support.js_helpers import jobset_body

pytestmark = pytest.mark.timeout(120)
QUIET_S, OUTAGE_S = 10.0, 15.0  # longer than the adapter rides out inside its own retries (about 8 s here)


async def test_an_outage_is_timed_from_its_first_failure_to_the_answer(outage_cluster, monkeypatch,  # noqa: F811
                                                                     tmp_path):
    monkeypatch.setattr(retry, "INITIAL_WAIT", 0.3)  # the adapter's retries still take seconds before they give up
    monkeypatch.setattr(retry, "MAX_WAIT", 1.0)
    lines_at = tmp_path / "trigger.log"
    logger = file_logger(lines_at)
    monkeypatch.setattr(JobSetTrigger, "log", property(lambda self: logger))
    outage_cluster.put_jobset(jobset_body(), status_running())
    trigger = JobSetTrigger(connection=outage_cluster.connection, namespace="default", name="train",
                            watch=WatchSettings(times=WatchTimes(poll_interval=0.5, progress_interval=None),
                                                pacing=ApiPacing(log_interval=60, backoff_max=1.0, request_timeout=2)))
    events = trigger.run()
    watching = asyncio.ensure_future(events.__anext__())
    try:
        await asyncio.sleep(QUIET_S)  # watching a quiet JobSet: no event since the watch began
        outage_started = time.monotonic()
        outage_cluster.faults.set("unavailable", seconds=OUTAGE_S, retry_after=0)
        deadline = time.monotonic() + 90
        while "answers again after" not in (lines_at.read_text() if lines_at.exists() else ""):
            assert time.monotonic() < deadline, lines_at.read_text() if lines_at.exists() else "no lines"
            assert not watching.done(), watching.result()
            await asyncio.sleep(0.2)
        seen_s = time.monotonic() - outage_started
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
        await events.aclose()
    text = lines_at.read_text()
    found = re.findall(r"Kubernetes API unreachable for (\d+) s", text)
    assert len(found) == 1, text
    unreachable = float(found[0])
    (answered,) = [float(x) for x in re.findall(r"answers again after (\d+) s", text)]
    # the first warning comes after the adapter's retries gave up: seconds into the outage, never 0, and not the
    # quiet watch before it
    assert 1 <= unreachable < OUTAGE_S + 2, text
    # the outage, from the first failed call to the answer: not less than the switch was on, and not the quiet
    # watch's 10 s on top (it is at most what this test saw, rounded)
    assert OUTAGE_S - 1 <= answered <= seen_s + 1 and answered < QUIET_S + OUTAGE_S - 2, (answered, seen_s, text)


async def test_a_gap_far_above_the_cadence_is_said_when_supervision_resumes(cluster, tmp_path, monkeypatch):
    """The triggerer was stopped (a metadata-database outage stops it; a SIGSTOP, a starved host) for 120 s: the
    watch's next look says so in the task log. The trigger's clock is stepped by hand, as the stall tests do."""
    from tests.doubles.memory_jobset import status_completed

    lines_at = tmp_path / "gap.log"
    logger = file_logger(lines_at)
    monkeypatch.setattr(JobSetTrigger, "log", property(lambda self: logger))
    now = [1000.0]
    looks = []

    def paused_once(obj):  # the JobSet's next status, read after the triggerer was away for 120 s
        now[0] += 120.0
        return status_running()

    cluster.plan([status_running(), paused_once, status_running(), status_completed()])
    cluster.create("default", jobset_body())
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    trigger = JobSetTrigger(connection={"kind": "local", "home": str(tmp_path / "home")}, namespace="default",
                            name="train", checkpoint_dir=str(checkpoints),
                            watch=WatchSettings(times=WatchTimes(poll_interval=1.0, progress_interval=None),
                                                stall_timeout=3600))

    def clock():
        now[0] += 0.01
        looks.append(now[0])
        return now[0]

    monkeypatch.setattr(trigger, "clock", clock)
    events = [event async for event in trigger.run()]
    assert events and events[-1].payload["kind"] == "ended", events
    text = lines_at.read_text()
    (gap,) = [float(x) for x in re.findall(r"supervision resumed after (\d+) s", text)]
    assert 120 <= gap <= 125 and "one look is due every 1 s" in text, text
