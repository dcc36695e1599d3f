"""A hang after progress on the local target (the local runner's JobSet, pods as processes, the local API server),
the next attempt submitted from the trigger (triggers.stall_end): the launch operator defers once, its trigger
(holding the task instance, as in the triggerer) sees attempt 1 stall, closes its record, deletes its JobSet and
waits until its pods are gone, creates attempt 2 and follows it to the target; the worker's `execute_complete` runs
once, at the end.

The workload is `mtc_local.light_workload` (no JAX; Orbax's on-disk layout, the same flags, events and exit codes):
`hang` on both slices SIGSTOPs their processes at step 8, after persistent step 5 (a collective that never
returns). The runner's deletion sends SIGTERM and SIGCONT (a hung pod can then handle it, as a kubelet's SIGTERM
reaches a process stuck in a collective), then SIGKILL after the grace period: the woken pods may still save while
they stop, which is why attempt 2 is created only once they are gone. Each fault fires once per run (docs/local-
target.md), so attempt 2 trains on. The trigger's XComs go through the triggerer's comms (RecordingComms).
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from airflow.sdk.exceptions import TaskDeferred

from mtc_local.cluster.client import LocalCluster
from mtc_provider.core.attempt import ledger as L
from mtc_provider.core.attempt.jobset_events import ENDED, JobSetEvent
from tests.operators.jobset.test_js_one_attempt_end import RecordingComms
from tests.support.js_helpers import FakeTI
from tests.support.local_light_run import home, light_run_operator  # noqa: F401 - home is a fixture

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

STEPS, PERSISTENT = 20, 5
FAULTS = [{"kind": "hang", "at_step": 8, "slice": 0}, {"kind": "hang", "at_step": 8, "slice": 1}]


def test_the_trigger_follows_a_hang_with_the_next_attempt_on_the_local_target(tmp_path, home, monkeypatch, caplog,
                                                                            capsys):
    from airflow.sdk.execution_time import task_runner

    comms = RecordingComms()
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", comms, raising=False)
    op = light_run_operator(tmp_path, home, "sit", STEPS, PERSISTENT, FAULTS,
                            {"termination_grace_period_seconds": 5}, deferrable=True,
                            # a hang is judged in seconds here (with room for a loaded machine), not in a large
                            # slice's minutes
                            stall_timeout=6, first_step_floor=60)
    ti = FakeTI(run_id="sit", max_tries=2)
    context = {"ti": ti, "run_id": ti.run_id}
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    trigger = deferred.value.trigger
    trigger.task_instance = ti
    first = trigger.name

    async def events():
        return [event async for event in trigger.run()]

    with caplog.at_level(logging.INFO):
        (event,) = asyncio.run(events())  # one event for the whole try: the task never resumed in between
    ev = JobSetEvent.from_payload(event.payload)
    assert ev.kind == ENDED and ev.extra["attempt"] == 2 and ev.verdict["kind"] == "succeed", ev
    said = capsys.readouterr().out.splitlines() + [rec.getMessage() for rec in caplog.records]
    assert any(f"deleting stalled JobSet default/{first}" in line and "asked by the attempt's own end (stalled:"
               in line and "trigger of try 1" in line for line in said), said[-60:]
    gone = [i for i, line in enumerate(said) if f"JobSet default/{first} is gone" in line]
    created = [i for i, line in enumerate(said) if "submitted JobSet" in line and "from the triggerer (attempt 2"
               in line]
    assert gone and created and gone[0] < created[0], said[-60:]  # its pods gone before attempt 2 existed
    fired = LocalCluster(str(home)).run_faults("default", "sit")
    assert sorted(f["kind"] for f in fired) == ["hang", "hang"], fired
    result = op.execute_complete(context, event.payload)  # the worker, once, at the try's end
    assert result["last_step"] == STEPS and result["attempt"] == 2
    attempts = ti.xcoms["attempts"]
    assert [(a["attempt"], a["try"], a["outcome"], a.get("in_try")) for a in attempts] == [
        (1, 1, "disrupted", True), (2, 1, "finished", None)], attempts
    assert attempts[1]["start"] >= attempts[0]["end"]
    ledger = L.RunLedger.from_dict(ti.xcoms["ledger"])
    assert [(i.attempt, i.kind) for i in ledger.interruptions] == [(1, L.STALL)], ledger.interruptions
    # the trigger wrote attempt 1's end and attempt 2's start; the worker only the try's end
    assert [a["attempt"] for a in comms.xcoms["attempts"]] == [1, 2]
