"""One ended attempt, two processes that may end its try, one record (issue #36, "One path for an attempt").

Each end kind is played once with the try ended by the worker (the trigger runs without a task instance, as under
`dag.test`, and hands the event to `execute_complete`) and once with the trigger holding the task instance, as in
the triggerer, where a plain retry is ended without a worker (triggers.attempt_end: a TaskFailedEvent). Both must
leave the same record in the run lock, the same `jobset`/`attempts` XComs, the same run record beside the
checkpoints (`mtc status` reads it), the same lines in the task log and a logs link narrowed to the attempt's
start..end (a running attempt's link spans a day: links.jobset.RUNNING_SPAN_S).

The cluster is the in-memory JobSet double (tests/doubles/memory_jobset.py: JobSet's own reasons and
`status.restarts`); the checkpoints are real folders; XComs a trigger pushes go through the triggerer's comms, whose
`asend(SetXCom)` is recorded here as Airflow's `TriggerCommsDecoder.asend` receives it (apache/airflow
airflow-core/src/airflow/jobs/triggerer_job_runner.py@3.3.2, adapters/live_xcom.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from urllib.parse import unquote

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from airflow.triggers.base import TaskFailedEvent

from mtc_provider import targets
from mtc_provider.core.attempt.run_summary import RECORD_FILE
from mtc_provider.links.jobset import JobSetLogsLink
from mtc_provider.operators.jobset import JobSetAttemptFailed
from mtc_provider.triggers import attempt_end
from tests.doubles.memory_jobset import (AsyncMemoryJobSetApi, MemoryJobSetApi, MemoryJobSetCluster,
                                         status_completed, status_failed, status_running)
from tests.support.js_helpers import FakeTI, ckpt_dir, finalize, launch, reach

pytestmark = pytest.mark.timeout(300)
SCOPE = {"project_id": "proj", "cluster": "tpu", "replicated_job": "slice"}  # what a GKE target's console gives


def _slow(status: dict, seconds: float = 0.05):
    def frame(obj):
        time.sleep(seconds)
        return status
    return frame


# case -> (launch arguments, the first attempt's script, what ends the try)
CASES = {
    "success": ({}, lambda t: [status_running(), reach(t, 100, status_completed())], "result"),
    "reached max restarts": ({}, lambda t: [status_running(), status_failed(restarts=2)], JobSetAttemptFailed),
    # the worker's submit of the next attempt, compared at both ends of attempt 1; the trigger's own submit (the
    # default) is held to the same records by tests/triggers/test_next_in_try.py
    "interrupted after progress": ({"next_attempt_in_trigger": False},
                                   lambda t: [status_running(), reach(t, 20, status_completed())], TaskDeferred),
    "stall": ({"stall_timeout": 0.3, "poll_interval": 0.01},
              lambda t: [status_running()] + [_slow(status_running())] * 400, JobSetAttemptFailed),
    "crash loop": ({"crash_loop_attempts": 1}, lambda t: [status_running(), status_completed()], AirflowFailException),
}


class RecordingComms:
    """The triggerer's comms as a trigger sees them (`task_runner.SUPERVISOR_COMMS`): `asend` takes each message."""

    def __init__(self) -> None:
        self.xcoms: dict[str, object] = {}

    async def asend(self, message) -> None:
        self.xcoms[message.key] = message.value


def _one_try(tmp_path, monkeypatch, case: str, in_triggerer: bool):
    """Play the case's first attempt to the end of its try; what the try ended with, and what it left."""
    from airflow.sdk.execution_time import task_runner

    monkeypatch.setattr("mtc_provider.operators.jobset_end.logs_scope", lambda target, replicated_job: dict(SCOPE))
    comms = RecordingComms()
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", comms, raising=False)
    overrides, script, _ = CASES[case]
    cluster = MemoryJobSetCluster()
    cluster.plan(script(tmp_path), [status_running()] * 3)  # the next attempt, if the try submits one, runs on
    finalize(ckpt_dir(tmp_path), 10)  # the run resumes at step 10
    ti = FakeTI(try_number=1, max_tries=6)
    context = {"ti": ti, "run_id": ti.run_id}
    op = launch(str(tmp_path), deferrable=True, **overrides)
    with targets.registered_jobset_api("local", lambda c: MemoryJobSetApi(cluster),
                                       lambda c: AsyncMemoryJobSetApi(cluster)):
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(context)
        trigger = deferred.value.trigger
        trigger.task_instance = ti if in_triggerer else None
        (event,) = asyncio.run(_events(trigger))
        if isinstance(event, TaskFailedEvent):
            ended = ("triggerer", JobSetAttemptFailed)
        else:
            try:
                ended = ("worker", op.execute_complete(context, event.payload))
            except (TaskDeferred, JobSetAttemptFailed, AirflowFailException) as exc:
                ended = ("worker", type(exc))
    xcoms = {**ti.xcoms, **comms.xcoms}
    record_file = tmp_path / "out" / "llama" / RECORD_FILE
    return ended, _same_place(xcoms, tmp_path), _same_place(json.loads(record_file.read_text()), tmp_path)


def _same_place(value, tmp_path):
    """Each path runs in a folder of its own, and a stall's wait is measured: both are read as the same."""
    text = json.dumps(value).replace(str(tmp_path), "<tmp>")
    return json.loads(re.sub(r"for \d+s \(stall limit", "for Ns (stall limit", text))


async def _events(trigger) -> list:
    return [event async for event in trigger.run()]


def _times_as_set(records: list[dict]) -> list[dict]:
    return [{k: (v is not None if k in ("start", "end") else v) for k, v in r.items()} for r in records]


def _ledger_facts(ledger: dict) -> dict:
    """The run's ledger without its times (each end has its own clock): the same facts whoever ends the try."""
    untimed = {key: [{k: (v is not None if k in ("at", "first_step_at") else v) for k, v in entry.items()}
                     for entry in ledger.get(key, [])] for key in ("starts", "saves", "interruptions", "decisions")}
    return {**untimed, "steps": [point[1:] for point in ledger.get("steps", [])]}


WANTED = re.compile(r"-> (succeed|retry|fail)|^resubmitting|^run llama: |could not|no retry left|crash loop")


def _lines(out: str, records: list[logging.LogRecord]) -> list[str]:
    """The provider's lines about the attempt's end, as the task log shows them (level and message)."""
    found = []
    for line in out.splitlines():
        match = re.match(r"\S+ \[(\w+)\s*\] (.*?) \[(airflow\.task\.operators\.)?mtc_provider", line)
        if match and WANTED.search(match.group(2)):
            found.append(f"{match.group(1)}: {match.group(2)}")
    found += [f"{r.levelname.lower()}: {r.getMessage()}" for r in records
              if r.name.startswith(("mtc_provider", "airflow.task")) and WANTED.search(r.getMessage())]
    return [re.sub(r"for \d+s \(stall limit", "for Ns (stall limit", re.sub(r"/tmp/\S*?/out/", "<tmp>/out/", line))
            for line in found]


def _logs_window(url: str) -> tuple[str, str]:
    """The link's query and its time range (start/end), from `/logs/query;query=...;timeRange=A/B?project=`."""
    match = re.search(r";query=([^;]*);timeRange=([^?]*)", url)
    return unquote(match.group(1)), unquote(match.group(2))


@pytest.mark.parametrize("case", list(CASES))
def test_the_same_ended_attempt_is_recorded_said_and_linked_the_same_whoever_ends_the_try(
        tmp_path_factory, monkeypatch, capsys, caplog, case):
    monkeypatch.setattr(attempt_end, "supported", lambda: True)  # the lowest-versions job runs Airflow 3.3.0
    seen = {}
    for in_triggerer in (False, True):
        caplog.clear()
        capsys.readouterr()
        with caplog.at_level(logging.INFO):
            ended, xcoms, run_record = _one_try(tmp_path_factory.mktemp(case.replace(" ", "-")),
                                                               monkeypatch, case, in_triggerer)
        seen[in_triggerer] = ended, xcoms, run_record, _lines(capsys.readouterr().out, caplog.records)

    (by_worker, worker_xcoms, worker_record, worker_lines) = seen[False]
    (by_trigger, trigger_xcoms, trigger_record, trigger_lines) = seen[True]
    expected_end = CASES[case][2]
    assert by_worker[0] == "worker"
    # Only a plain retry without progress is ended in the triggerer; every other end resumes the worker.
    assert by_trigger[0] == ("triggerer" if case == "reached max restarts" else "worker")
    for who, what in (by_worker, by_trigger):
        assert (isinstance(what, dict) if expected_end == "result" else what is expected_end), (who, what)

    # The records: in the run lock (the attempts XCom is its copy) and beside the checkpoints.
    assert _times_as_set(worker_xcoms["attempts"]) == _times_as_set(trigger_xcoms["attempts"])
    first = worker_xcoms["attempts"][0]
    assert first["end"] is not None and first["reason"] == worker_xcoms["jobset"]["reason"]
    assert worker_xcoms["jobset"] == trigger_xcoms["jobset"]
    # The run's ledger: the end's interruption and decision beside what the trigger saw, whoever ends the try.
    assert _ledger_facts(worker_xcoms["ledger"]) == _ledger_facts(trigger_xcoms["ledger"])
    assert [d["attempt"] for d in worker_xcoms["ledger"]["decisions"]] == [1]
    for record in (worker_record, trigger_record):
        record["attempts"] = _times_as_set(record["attempts"])
        record["ledger"] = _ledger_facts(record["ledger"])
        record.pop("updated")
        # the trigger's last progress figures travel to either end; their clock-based ones are the trigger's own
        record["progress"] = {k: v for k, v in (record["progress"] or {}).items()
                              if k in ("attempt", "latest_step", "newest_checkpoint", "target_step", "percent")}
    assert worker_record == trigger_record
    # the same try goes on after an interruption with progress: its next attempt is running
    assert worker_record["state"] == {"success": "succeeded", "crash loop": "failed",
                                      "interrupted after progress": "running"}.get(case, "retrying")
    assert len(worker_record["attempts"]) == (2 if case == "interrupted after progress" else 1)

    # The lines: the decision, the one line that says what follows, the run record written.
    assert worker_lines == trigger_lines and worker_lines, (worker_lines, trigger_lines)
    if case == "reached max restarts":
        assert any(line.startswith("warning: resubmitting (try 2 of 7 next): failed after 2 in-cluster restarts")
                   for line in worker_lines), worker_lines
        assert worker_record["reason"].startswith("resubmitting (try 2 of 7 next)")
        assert first["reason"].startswith("failed after 2 in-cluster restarts") and first["interruption"] == "failed"

    # The logs link: narrowed to the attempt's own start..end, the same query from both ends (after an interruption
    # with progress, the next attempt's own links are stored: the local target has no console, so none).
    if case == "interrupted after progress":
        assert worker_xcoms[JobSetLogsLink.key] == trigger_xcoms[JobSetLogsLink.key] == ""
        return
    worker_query, worker_range = _logs_window(worker_xcoms[JobSetLogsLink.key])
    trigger_query, trigger_range = _logs_window(trigger_xcoms[JobSetLogsLink.key])
    assert worker_query == trigger_query and 'jobset-name"="train-' in worker_query
    for window, attempts in ((worker_range, worker_xcoms["attempts"]), (trigger_range, trigger_xcoms["attempts"])):
        start, end = (time.mktime(time.strptime(t, "%Y-%m-%dT%H:%M:%SZ")) for t in window.split("/"))
        assert end - start < 3600, window  # not the running attempt's day
        assert attempts[0]["end"] is not None
