"""`MtcDeleteJobSetOperator`: the teardown that frees a run's slices (its JobSets); checkpoints are kept."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from airflow.sdk.exceptions import AirflowFailException

from mtc_provider.core.basics import labels as L
from mtc_provider.core.basics import vocabulary as V
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.attempt.launch import kept_failed
from mtc_provider.core.attempt.launch_options import keep_count
from mtc_provider.core.attempt.ownership import describe_owner
from mtc_provider.core.attempt.ownership import task_owner as _owner
from mtc_provider.core.attempt.status import evaluate_jobset
from mtc_provider.operators.base import JOBSET_TARGET_FIELDS, JobSetTargetMixin
from mtc_provider.operators.jobset_failures import JOBSET_KEPT_XCOM_KEY


class MtcDeleteJobSetOperator(JobSetTargetMixin):
    """Delete a run's JobSets (by name, or every attempt of a run by run labels); checkpoints are kept.

    Use as a teardown (`.as_teardown(setups=launch)`) so slices are freed whatever happened.

    :param namespace: the JobSets' namespace.
    :param name: delete this JobSet; or leave it out and give run_name + launch_task_id.
    :param run_name: with launch_task_id: delete every attempt the launch task made for this run name.
    :param launch_task_id: the task id of the MtcJobSetOperator whose attempts to delete.
    :param keep_failed_attempts: with run_name: keep the newest N failed attempts' JobSets (templated; default 0:
        the teardown deletes every attempt). For a run launched with keep_failed_attempts, to debug it after the
        run; `mtc delete RUN` deletes them later. Each kept JobSet is logged.

    Where the JobSets are: target, kubernetes_conn_id and the google provider's parameters, as JobSetTargetMixin
    takes them (which one wins: as on MtcJobSetOperator, target.with_google).
    """

    template_fields: Sequence[str] = ("name", "namespace", *JOBSET_TARGET_FIELDS, "run_name", "launch_task_id",
                                      "keep_failed_attempts")

    def __init__(self, *, namespace: str = "default", name: str | None = None, run_name: str | None = None,
                 launch_task_id: str | None = None, keep_failed_attempts: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.keep_failed_attempts = keep_failed_attempts
        self.namespace = namespace
        self.name = name
        self.run_name = run_name
        self.launch_task_id = launch_task_id

    def execute(self, context: Any) -> list[str]:
        if not self.name and not (self.run_name and self.launch_task_id):
            raise AirflowFailException(str(SpecError("name", self.name, "a JobSet name, or run_name + launch_task_id")))
        try:
            keep = keep_count("keep_failed_attempts", self.keep_failed_attempts)
        except SpecError as exc:
            raise AirflowFailException(f"invalid spec: {exc}") from exc
        if not self.name:
            kept = context["ti"].xcom_pull(task_ids=self.launch_task_id, key=JOBSET_KEPT_XCOM_KEY)
            if kept:  # the launch task ended for the orchestrator's trouble: the run itself did not end
                self.log.warning(
                    "teardown keeps the JobSets of run %s and its run lock: task %s ended for the orchestrator's own "
                    "trouble, not the run's (%s). Clear %s once that is fixed: it reattaches. To stop the run "
                    "instead: mtc unlock %s -n %s --force and kubectl delete jobset -n %s -l %s=%s", self.run_name,
                    self.launch_task_id, (kept.get("reason") if isinstance(kept, Mapping) else kept),
                    self.launch_task_id, self.run_name, self.namespace, self.namespace, L.RUN_NAME,
                    L.label_value(self.run_name))
                return []
        from mtc_provider.hooks.jobset import MtcJobSetHook

        hook = MtcJobSetHook(connection=self._connection())
        if self.name:
            names, why = [self.name], "asked by name"
        else:
            ti = context["ti"]
            run_labels = L.run_labels(ti.dag_id, ti.run_id, self.launch_task_id, self.run_name)
            lock = hook.run_lock(self.namespace, self.run_name, run_labels)
            elsewhere = lock.held_elsewhere()
            if elsewhere:  # its JobSets may carry this run's labels: nothing here is ours to delete
                self.log.warning("teardown deletes nothing of run %s: its run lock %s/%s says %s", self.run_name,
                                 self.namespace, lock.name, elsewhere)
                return []
            found = hook.api.list(self.namespace, L.selector(run_labels))
            live = sorted(o["metadata"]["name"] for o in found if evaluate_jobset(o).live)
            if live and _held_by(lock, run_labels):
                # Every end of a run (success, a final failure, the last try) frees its lock first; a lock still
                # held beside a live JobSet means the launch task stopped for the orchestrator's trouble (a worker
                # killed, a record that could not be written): the JobSet may be training.
                self.log.warning(
                    "teardown keeps the live JobSets %s of run %s and its run lock: task %s still holds the lock, so "
                    "the run did not end (the task stopped for the orchestrator's own trouble). Clear %s to "
                    "reattach; to stop the run: mtc delete %s", ", ".join(live), self.run_name, self.launch_task_id,
                    self.launch_task_id, self.run_name)
                return []
            kept, who = kept_failed(found, keep), describe_owner(_owner(ti))
            for name in sorted(kept):
                self.log.warning("teardown keeps failed JobSet %s/%s for debugging (keep_failed_attempts=%s, asked by "
                                 "%s): delete it with mtc delete %s", self.namespace, name, keep, who, self.run_name)
            names = [o["metadata"]["name"] for o in found if o["metadata"]["name"] not in kept]
            why = f"the teardown after the run ended (task {self.launch_task_id} is done; asked by {who})"
        for name in names:
            self.log.info("deleting JobSet %s/%s (checkpoints are kept): %s", self.namespace, name, why)
            hook.delete(name, self.namespace, reason=V.DELETE_TEARDOWN)
        if not self.name:  # the run is over: free its run name (the lock of that launch task, if still held)
            lock.release()
        return names


def _held_by(lock: Any, run_labels: Mapping[str, str]) -> bool:
    """Whether the run lock is held by the launch task these labels name."""
    from mtc_provider.adapters.run_lock import HOLDER

    holder = lock.read().get(HOLDER) or {}
    return bool(holder) and all(holder.get(key) == run_labels.get(key) for key in (L.DAG_ID, L.RUN_ID, L.TASK_ID))
