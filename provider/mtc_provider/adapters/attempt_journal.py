"""The attempt journal: where both ends of a try write an attempt's start and end (I/O only).

The worker (operators.jobset) and the triggerer (triggers.attempt_end) decide an end by the same pure rule
(core.attempt.attempt_records.end_of_attempt) and write it through this one journal, so the run lock's record, the
XComs, the logs link, the run's record and ledger and the task-log lines are the same whoever ended the try. XComs go
through `push(key, value)`: the task's `xcom_push` in the worker, a list the trigger sends through the triggerer's
comms (adapters.live_xcom).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from mtc_provider.adapters.run_lock import ATTEMPTS, HISTORY, LEDGER, RunLock
from mtc_provider.core.attempt.attempt_records import AttemptEnd, AttemptRecord

XCOM_KEY = "jobset"  # the attempt's end: jobset_name, namespace, attempt, restarts, last_step, reason
ATTEMPTS_XCOM_KEY = "attempts"  # every attempt record so far (a try's XComs are cleared when the next starts)
PROGRESS_XCOM_KEY = "progress"  # the latest progress figures of the watch (core.measure.progress_report)
LEDGER_XCOM_KEY = "ledger"  # the run's ledger (core.attempt.ledger.RunLedger.to_dict), as the run lock holds it
RUN_XCOM_KEY = "mtc_run"  # checkpoint_dir, target_step, run_name: pushed at each try's launch, for the run view


@dataclass(frozen=True)
class RunRecordPlace:
    """Where and for whom the run's record beside its checkpoints is written (adapters.run_records)."""

    checkpoint_dir: str
    gcp_conn_id: str
    impersonation_chain: Any
    run_name: str
    namespace: str
    target_step: int | None
    owner: Mapping[str, Any]


def logs_scope(target: Any, replicated_job: str | None) -> dict[str, Any] | None:
    """What the logs link needs, serializable for the trigger: None on a target without a Cloud Console."""
    from mtc_provider.targets import backend_for

    scope = backend_for(target).console
    if scope is None:
        return None
    return {"project_id": scope.project_id, "cluster": scope.cluster_name, "replicated_job": replicated_job}


class AttemptJournal:
    """Open and close a run's attempt records in its run lock, and say so where people and tools read it."""

    def __init__(self, lock: RunLock, *, push: Callable[[str, Any], None], log: Any,
                 run_record: RunRecordPlace | None = None, logs: Mapping[str, Any] | None = None,
                 links: bool = True, clock: Callable[[], float] = time.time) -> None:
        self.lock = lock
        self.push = push
        self.log = log
        self.run_record = run_record  # None: no record (a one-shot job's checkpoints are another run's)
        self.logs = logs  # logs_scope(...)
        self.links = links  # False: the logs link is left as it is (its scope is not known)
        self.clock = clock
        self.attempts: list[dict[str, Any]] = []  # the lock's records, as last read
        self.ledger: dict[str, Any] | None = None  # the lock's ledger, as last read (None: not read yet)

    def open(self, record: AttemptRecord, history: list[int | None]) -> list[dict[str, Any]]:
        """Keep the step history and the new attempt's record (not again on a reattach); every record so far."""
        opened = record.to_dict()

        def remember(data: dict[str, Any]) -> None:
            data[HISTORY] = history
            if not any(r.get("jobset") == record.jobset for r in data[ATTEMPTS]):
                data[ATTEMPTS].append(opened)

        return self.lock.update(remember).get(ATTEMPTS) or [opened]

    def close(self, end: AttemptEnd, cause: str | None = None, once: bool = False) -> dict[str, Any]:
        """Close the attempt's open record and add its interruption and decision to the run's ledger, then report
        it (XComs, logs link); returns the `jobset` XCom. `cause`: the interruption's kind when the end's fields
        cannot tell it (core.attempt.ledger.end_facts: a stall, a start-up timeout). `once`: the ledger's facts
        only if this write closes the record (two live copies of one trigger ending the same attempt)."""
        now = self.clock()
        self.lock.close_attempt(end, now, also=self._ledger_change(end, now, cause), once=once)
        return self.report(end.namespace, end.jobset, end.attempt, end.restarts, end.last_step, end.reason)

    def _ledger_change(self, end: AttemptEnd, now: float, cause: str | None) -> Callable[[dict[str, Any]], None]:
        """The end's interruption and decision added to the ledger, in the record's own write; best effort: a fact
        the ledger refuses is logged, and the record is closed all the same."""
        from mtc_provider.adapters.run_ledger import merge_into
        from mtc_provider.core.attempt.ledger import RunLedger, end_facts

        def change(data: dict[str, Any]) -> None:
            try:
                interruption, decision = end_facts(at=now, attempt=int(end.attempt), kind=end.kind,
                                                   reason=end.reason, outcome=end.outcome,
                                                   interruption=end.interruption, in_try=end.in_try,
                                                   step=end.last_step, cause=cause)
                facts = RunLedger().add_decision(decision)
                merge_into(data, facts.add_interruption(interruption) if interruption else facts)
            except Exception as exc:  # noqa: BLE001 - the ledger is for reading the run; it never changes its end
                self.log.warning("could not add the end of attempt %s to the run's ledger: %s", end.attempt, exc)
        return change

    def fault(self, attempt: int, latest: int | None) -> None:
        """The orchestrator lost this try's watch of the attempt (which may train on): an interruption in the run's
        ledger, before the report pushes it; best effort."""
        from mtc_provider.adapters.run_ledger import add_to_ledger
        from mtc_provider.core.attempt.ledger import ORCHESTRATOR_FAULT, Interruption, RunLedger

        try:
            add_to_ledger(self.lock, RunLedger().add_interruption(
                Interruption(self.clock(), int(attempt), ORCHESTRATOR_FAULT, latest)))
        except Exception as exc:  # noqa: BLE001 - the ledger is for reading the run; it never changes its end
            self.log.warning("could not add the orchestrator fault to the run's ledger: %s", exc)

    def report(self, namespace: str, name: str, attempt: int, restarts: int, latest: int | None,
               reason: str) -> dict[str, Any]:
        """The attempt's figures and every record so far as XComs, and its logs link narrowed to its record."""
        result = {"jobset_name": name, "namespace": namespace, "attempt": attempt, "restarts": restarts,
                  "last_step": latest, "reason": reason}
        self.push(XCOM_KEY, result)
        stored = self.lock.read()
        self.attempts, self.ledger = stored[ATTEMPTS], stored.get(LEDGER) or {}
        self.push(ATTEMPTS_XCOM_KEY, self.attempts)
        self.push(LEDGER_XCOM_KEY, self.ledger)
        self.relink_logs(namespace, name)
        return result

    def relink_logs(self, namespace: str, name: str) -> None:
        """The logs link again, now scoped to the attempt's start..end (its record); before, it spans a day."""
        record = next((r for r in reversed(self.attempts) if r.get("jobset") == name), None)
        if not self.links or record is None or record.get("start") is None:
            return
        from mtc_provider.links.jobset import JobSetLogsLink, logs_url

        try:
            url = "" if not self.logs else logs_url(self.logs["project_id"], self.logs["cluster"], namespace, name,
                                                    record["start"], record.get("end") or self.clock(),
                                                    self.logs.get("replicated_job"))
            self.push(JobSetLogsLink.key, url)
        except Exception as exc:  # noqa: BLE001 - a link must never change how the attempt ends
            self.log.warning("could not update the pod logs link of %s/%s: %s", namespace, name, exc)

    def record_run(self, state: str, reason: str, progress: Mapping[str, Any] | None = None) -> None:
        """The run's record beside its checkpoints, with every attempt as last read."""
        write_run_record(self.run_record, state, reason, self.attempts, progress, self.log, self.ledger)

    def settings(self) -> dict[str, Any]:
        """What a trigger needs to build the same journal (serializable: no token, no client)."""
        return {"run_record": dataclasses.asdict(self.run_record) if self.run_record else None, "logs": self.logs,
                "links": self.links}

    @classmethod
    def from_settings(cls, lock: RunLock, settings: Mapping[str, Any], **kwargs: Any) -> "AttemptJournal":
        place = settings.get("run_record")
        return cls(lock, run_record=RunRecordPlace(**place) if place else None, logs=settings.get("logs"),
                   links=bool(settings.get("links", True)), **kwargs)


def write_run_record(place: RunRecordPlace | None, state: str, reason: str, attempts: list[dict[str, Any]],
                     progress: Mapping[str, Any] | None, log: Any, ledger: Mapping[str, Any] | None = None) -> None:
    """The run's record beside its checkpoints (read by `mtc status`/`mtc list`; adapters.run_records). Best
    effort: a record that cannot be written is logged, and never changes how the attempt ends. None: no record (a
    one-shot job's checkpoints belong to another run)."""
    if place is None:
        return
    try:
        from mtc_provider.adapters.run_records import record_run

        where = record_run(place.checkpoint_dir, place.gcp_conn_id, place.impersonation_chain,
                           run_name=place.run_name, namespace=place.namespace, target_step=place.target_step,
                           state=state, attempts=attempts, owner=place.owner, reason=reason, progress=progress,
                           ledger=ledger)
        log.info("run %s: %s, %d attempt(s) recorded in %s", place.run_name, state, len(attempts), where)
    except Exception as exc:  # noqa: BLE001 - the record is for people reading the run later
        log.warning("could not write the run's attempt record beside %s: %s", place.checkpoint_dir, exc)
