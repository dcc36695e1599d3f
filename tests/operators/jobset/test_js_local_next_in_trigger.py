"""A preemption after progress on the local target (the local runner's JobSet, pods as processes, the local API
server), the next attempt submitted from the trigger (`next_attempt_in_trigger=True`; triggers.next_in_try): the
launch operator defers once, its trigger (holding the task instance, as in the triggerer) follows attempt 1 to
its end, creates attempt 2 and follows it to the target; the worker's `execute_complete` runs once, at the end.

The workload is `mtc_local.light_workload` (no JAX; Orbax's on-disk layout, the same flags, events and exit codes):
`sigterm_slice` on both slices makes it save (autocheckpoint) and exit 0, so the JobSet completes below its target,
as MaxText's does under a graceful preemption. The runner fires each fault once per run (keyed on the run-name
label: docs/local-target.md), so attempt 2 trains on. The trigger's XComs go through the triggerer's comms, recorded
as `TriggerCommsDecoder.asend` receives them (tests/operators/jobset/test_js_one_attempt_end.py).
"""

from __future__ import annotations

import asyncio

import pytest
from airflow.sdk.exceptions import TaskDeferred

from mtc_provider.core.attempt.jobset_events import ENDED, JobSetEvent
from tests.operators.jobset.test_js_one_attempt_end import RecordingComms
from tests.support.js_helpers import FakeTI
from tests.support.local_light_run import home, light_run_operator  # noqa: F401 - home is a fixture

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # 19 s measured with another test run beside it

STEPS, PERSISTENT = 20, 5
FAULTS = [{"kind": "sigterm_slice", "at_step": 8, "slice": 0}, {"kind": "sigterm_slice", "at_step": 8, "slice": 1}]


def test_the_trigger_submits_the_next_attempt_on_the_local_target(tmp_path, home, monkeypatch):
    from airflow.sdk.execution_time import task_runner

    comms = RecordingComms()
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", comms, raising=False)
    op = light_run_operator(tmp_path, home, "nit", STEPS, PERSISTENT, FAULTS, deferrable=True,
                            next_attempt_in_trigger=True)
    ti = FakeTI(run_id="nit", max_tries=2)
    context = {"ti": ti, "run_id": ti.run_id}
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    trigger = deferred.value.trigger
    trigger.task_instance = ti

    async def events():
        return [event async for event in trigger.run()]

    (event,) = asyncio.run(events())
    ev = JobSetEvent.from_payload(event.payload)
    assert ev.kind == ENDED and ev.extra["attempt"] == 2 and ev.verdict["kind"] == "succeed", ev
    result = op.execute_complete(context, event.payload)  # the worker, once, at the try's end
    assert result["last_step"] == STEPS and result["attempt"] == 2
    attempts = ti.xcoms["attempts"]
    assert [(a["attempt"], a["try"], a["outcome"], a.get("interruption"), a.get("in_try")) for a in attempts] == [
        (1, 1, "disrupted", "graceful", True), (2, 1, "finished", None, None)], attempts
    assert attempts[1]["start"] >= attempts[0]["end"]
    # the trigger wrote attempt 1's end and attempt 2's start; the worker only the try's end
    assert [a["attempt"] for a in comms.xcoms["attempts"]] == [1, 2]
