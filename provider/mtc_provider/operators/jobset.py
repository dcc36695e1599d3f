"""Launch a training JobSet, follow it, and let Airflow's retries resubmit it until training reaches its target.

One try of the task is one attempt. A try first looks for its run's JobSets by label (dag, run, task,
run name): a live one is reattached to (a worker that died, or a triggerer restart, never leads to a
second JobSet); an ended one is deleted (its checkpoints stay) and the next attempt is submitted with
the same run_name, so it resumes from the newest checkpoint. When the attempt ends, the newest
finalized checkpoint step decides (core.resubmission): succeed, retry (a retryable exception, so
Airflow's retries resubmit) or fail for good (AirflowFailException with the reason).

Attempt JobSets are named `<jobset_name>-<run hash>-a<try>`: a new name per attempt means a new
attempt never waits for the foreground deletion of the previous one, and the run hash keeps two DAG
runs apart. The step history (newest finalized step when each attempt started) travels in an
annotation from attempt to attempt, so crash-loop detection needs no Airflow state.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from datetime import timedelta
from typing import Any, Callable, Mapping, Sequence

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from mtc_provider.adapters import jobset_factory
from mtc_provider.adapters.pod_logs import log_failed_pod_tails
from mtc_provider.adapters.protocols import AlreadyExists, ApiError, CheckpointStore
from mtc_provider.core import labels as L
from mtc_provider.core.customization import CustomizationSpec
from mtc_provider.core.errors import SpecError
from mtc_provider.core.resubmission import (
    DEFAULT_CRASH_LOOP_ATTEMPTS,
    FAIL,
    SUCCEED,
    decide,
    decide_on_completion,
    decide_rejected,
)
from mtc_provider.core.spec import CheckpointingSpec, WorkloadSpec
from mtc_provider.core.status import JobSetState, evaluate_jobset
from mtc_provider.core.tpu import SliceSpec
from mtc_provider.links.jobset import JOBSET_LINKS, persist_links
from mtc_provider.target import GkeTarget, LocalTarget, target_from_dict
from mtc_provider.triggers.jobset import DELETED, ENDED, ERROR, STALLED, JobSetEvent, JobSetTrigger

try:
    from airflow.sdk.configuration import conf
except ImportError:  # pragma: no cover - older Airflow
    from airflow.configuration import conf

STEP_HISTORY_ANNOTATION = f"{L.PREFIX}/step-history"
XCOM_KEY = "jobset"
ATTEMPT_SUFFIX_MAX = len("-00000-a999")
WAIT_FOR_CHECKPOINT = "checkpoint"
WAIT_FOR_COMPLETION = "completion"
WAIT_FOR = (WAIT_FOR_CHECKPOINT, WAIT_FOR_COMPLETION)


class JobSetAttemptFailed(AirflowException):
    """This attempt ended without reaching the target step, for a retryable reason: Airflow retries resubmit."""


def _spec(kind: type, section: str, value: Any) -> Any:
    """Accept a spec object or a plain dict (DAG params); errors name the field and what is allowed."""
    if isinstance(value, kind):
        return value
    if not isinstance(value, Mapping):
        raise SpecError(section, value, f"a {kind.__name__} or a mapping of its fields")
    known = {f.name for f in dataclasses.fields(kind)}
    for key in value:
        if key not in known:
            raise SpecError(f"{section}.{key}", value[key], f"one of {', '.join(sorted(known))}")
    missing = [f.name for f in dataclasses.fields(kind) if f.name not in value
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise SpecError(f"{section}.{missing[0]}", None, "a value (required)")
    values = dict(value)
    if "command" in values and isinstance(values["command"], list):
        values["command"] = tuple(values["command"])
    return kind(**values)


def _trial_render(slices: SliceSpec, checkpointing: CheckpointingSpec, workload: WorkloadSpec, customization) -> None:
    from mtc_provider.core.jobset import build_jobset

    build_jobset(slices, checkpointing, workload, customization=CustomizationSpec.from_value(customization))


def attempt_name(jobset_name: str, dag_id: str, run_id: str, task_id: str, try_number: int) -> str:
    """`<jobset_name>-<5 hex of the run>-a<try>`, cut to the JobSet name limit (40)."""
    digest = hashlib.sha256(f"{dag_id}/{run_id}/{task_id}".encode()).hexdigest()[:5]
    suffix = f"-{digest}-a{try_number}"
    return f"{jobset_name[: 40 - len(suffix)].rstrip('-')}{suffix}"


def _attempt_of(obj: Mapping[str, Any]) -> int:
    value = (obj.get("metadata", {}).get("labels") or {}).get(L.TRY_NUMBER, "0")
    return int(value) if str(value).isdigit() else 0


def _history_of(obj: Mapping[str, Any]) -> list[int | None]:
    raw = (obj.get("metadata", {}).get("annotations") or {}).get(STEP_HISTORY_ANNOTATION, "[]")
    try:
        history = json.loads(raw)
    except ValueError:
        return []
    return [s if isinstance(s, int) else None for s in history] if isinstance(history, list) else []


class MtcJobSetOperator(BaseOperator):
    """Run multi-slice training as a JobSet with the MTC ramdisk until it reaches `target_step`.

    :param slices: SliceSpec or dict (tpu_type, topology, num_slices, machine_type).
    :param checkpointing: CheckpointingSpec or dict (run_name, base_output_directory, steps, MaxText flags).
    :param workload: WorkloadSpec or dict (jobset_name, image, command, namespace, max_restarts, ...).
    :param target: GkeTarget, LocalTarget or a dict (kind gke|local); None is the local target.
    :param kubernetes_conn_id: use this cncf.kubernetes connection instead of GKE credentials.
    :param target_step: the step that means "done"; default `checkpointing.steps`.
    :param crash_loop_attempts: fail for good after this many consecutive attempts without checkpoint progress.
    :param poll_interval: seconds between polls when the watch cannot be used, and between stall checks.
    :param stall_timeout: seconds without a new finalized checkpoint before the attempt counts as stalled.
    :param deferrable: wait in the triggerer (default: Airflow's operators.default_deferrable).
    :param checkpoint_store_factory: (checkpoint_dir, gcp_conn_id) -> CheckpointStore; default open_store.
    :param wait_for: "checkpoint" (training: done when the newest finalized checkpoint reaches `target_step`)
        or "completion" (a one-shot job such as an evaluation: done when the JobSet completes; no checkpoint
        store is read, no stall or crash-loop detection; a retryable failure is still resubmitted).
    :param fault_plan: local target only: faults the runner injects into the run (a list of
        {kind, at_step|at_seconds, slice, host}, or {seed, faults}); each fires once per training run.
    :param customization: CustomizationSpec or dict: Kueue queue and priority, spot or reserved capacity, extra
        volumes, env from Secrets/ConfigMaps (references only), /dev/shm size, validated overrides
        (see core.customization).
    :param retries: resubmissions allowed (each Airflow retry submits the next attempt).
    :param retry_delay: wait before the first resubmission.
    :param retry_exponential_backoff: multiply the wait by this factor after each attempt.
    :param max_retry_delay: the longest wait between attempts.
    """

    template_fields: Sequence[str] = (
        "slices", "checkpointing", "workload", "target", "target_step", "fault_plan", "stall_timeout",
        "customization",
    )
    template_fields_renderers = {"slices": "json", "checkpointing": "json", "workload": "json"}
    operator_extra_links = JOBSET_LINKS
    ui_color = "#d9ead3"

    def __init__(
        self,
        *,
        slices: SliceSpec | Mapping[str, Any],
        checkpointing: CheckpointingSpec | Mapping[str, Any],
        workload: WorkloadSpec | Mapping[str, Any],
        target: Any = None,
        kubernetes_conn_id: str | None = None,
        target_step: int | None = None,
        crash_loop_attempts: int = DEFAULT_CRASH_LOOP_ATTEMPTS,
        poll_interval: float = 30.0,
        stall_timeout: float | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        checkpoint_store_factory: Callable[[str, str], CheckpointStore] | None = None,
        fault_plan: list[Mapping[str, Any]] | Mapping[str, Any] | None = None,
        wait_for: str = WAIT_FOR_CHECKPOINT,
        customization: CustomizationSpec | Mapping[str, Any] | None = None,
        retries: int = 6,
        retry_delay: timedelta = timedelta(seconds=30),
        retry_exponential_backoff: float = 2.0,
        max_retry_delay: timedelta = timedelta(minutes=30),
        **kwargs: Any,
    ) -> None:
        super().__init__(retries=retries, retry_delay=retry_delay, retry_exponential_backoff=retry_exponential_backoff,
                         max_retry_delay=max_retry_delay, **kwargs)
        self.slices = slices
        self.checkpointing = checkpointing
        self.workload = workload
        self.target = target
        self.kubernetes_conn_id = kubernetes_conn_id
        self.target_step = target_step
        self.crash_loop_attempts = crash_loop_attempts
        self.poll_interval = poll_interval
        self.stall_timeout = stall_timeout
        self.deferrable = deferrable
        self.checkpoint_store_factory = checkpoint_store_factory
        self.fault_plan = fault_plan
        self.wait_for = wait_for
        self.customization = customization
        self._current: tuple[dict[str, Any], str, str] | None = None  # (connection, namespace, name) for on_kill

    # --- inputs -------------------------------------------------------------------------------------
    def _specs(self) -> tuple[SliceSpec, CheckpointingSpec, WorkloadSpec, int]:
        try:
            slices = _spec(SliceSpec, "slices", self.slices)
            checkpointing = _spec(CheckpointingSpec, "checkpointing", self.checkpointing)
            workload = _spec(WorkloadSpec, "workload", self.workload)
            _trial_render(slices, checkpointing, workload, self.customization)  # refusals before any side effect
            target_step = checkpointing.steps if self.target_step in (None, "") else int(self.target_step)
            if target_step <= 0:
                raise SpecError("target_step", self.target_step, "a positive integer (default: checkpointing.steps)")
            if isinstance(self.crash_loop_attempts, bool) or not isinstance(self.crash_loop_attempts, int) \
                    or self.crash_loop_attempts < 1:
                raise SpecError("crash_loop_attempts", self.crash_loop_attempts, "an integer >= 1")
            if self.wait_for not in WAIT_FOR:
                raise SpecError("wait_for", self.wait_for, " or ".join(WAIT_FOR))
            target = target_from_dict(self.target)
            if self.fault_plan and not isinstance(target, LocalTarget):
                raise SpecError("fault_plan", self.fault_plan, "empty on the gke target (faults are injected locally)")
            if self.stall_timeout not in (None, "") and float(self.stall_timeout) <= 0:
                raise SpecError("stall_timeout", self.stall_timeout, "a positive number of seconds, or None")
        except (SpecError, ValueError) as exc:
            raise AirflowFailException(f"invalid spec: {exc}") from exc
        return slices, checkpointing, workload, target_step

    @property
    def _completion(self) -> bool:
        return self.wait_for == WAIT_FOR_COMPLETION

    def _latest(self, store: CheckpointStore | None, checkpoint_dir: str) -> int | None:
        """The newest finalized step; None in completion mode, which never reads a checkpoint store."""
        return None if store is None else store.latest_step(checkpoint_dir)

    def _store(self, checkpoint_dir: str) -> CheckpointStore | None:
        if self._completion:
            return None
        target = target_from_dict(self.target)
        gcp_conn_id = target.gcp_conn_id if isinstance(target, GkeTarget) else "google_cloud_default"
        if self.checkpoint_store_factory is not None:
            return self.checkpoint_store_factory(checkpoint_dir, gcp_conn_id)
        from mtc_provider.adapters.checkpoint_stores import open_store

        return open_store(checkpoint_dir, gcp_conn_id=gcp_conn_id)

    # --- execute ------------------------------------------------------------------------------------
    def execute(self, context: Any) -> Any:
        slices, checkpointing, workload, target_step = self._specs()
        ti = context["ti"]
        run_labels = L.run_labels(ti.dag_id, ti.run_id, ti.task_id, checkpointing.run_name)
        namespace = workload.namespace
        connection = jobset_factory.connection_for(self.target, self.kubernetes_conn_id)
        api = jobset_factory.jobset_api(connection)
        store = self._store(checkpoint_dir := checkpointing.checkpoint_directory)  # None: completion mode

        found = sorted(self._this_tasks_jobsets(api, namespace, checkpointing.run_name, run_labels), key=_attempt_of)
        live = [o for o in found if not evaluate_jobset(o).ended]
        if live:
            obj = live[-1]
            self.log.info("reattaching to JobSet %s/%s (attempt %s), not creating another",
                          namespace, obj["metadata"]["name"], _attempt_of(obj))
        else:
            history = _history_of(found[-1]) if found else []
            previous_step = self._latest(store, checkpoint_dir)  # ended attempts write nothing more
            if found:
                newest = found[-1]
                state = evaluate_jobset(newest)
                done = self._completion or (previous_step is not None and previous_step >= target_step)
                if state.phase == "succeeded" and done:
                    self.log.info("JobSet %s already completed: taking its result", state.name)
                    return self._finish(context, connection, state, _attempt_of(newest), history, store,
                                        checkpoint_dir, target_step, state.restarts)
                for old in found:  # ended attempts: free the slices; checkpoints stay in the bucket
                    self.log.info("deleting ended JobSet %s (%s) before the next attempt",
                                  old["metadata"]["name"], evaluate_jobset(old).phase)
                    api.delete(namespace, old["metadata"]["name"])
            history = history + [previous_step]
            obj = self._submit(api, slices, checkpointing, workload, run_labels, ti, history)
        name = obj["metadata"]["name"]
        self._current = (connection, namespace, name)
        persist_links(context, target_from_dict(self.target), namespace, name, checkpoint_dir)
        state = evaluate_jobset(obj)
        stall_timeout = None if self._completion or self.stall_timeout in (None, "") else float(self.stall_timeout)
        trigger = JobSetTrigger(
            connection=connection, namespace=namespace, name=name,
            resource_version=obj["metadata"].get("resourceVersion"), restarts_seen=state.restarts,
            poll_interval=self.poll_interval, checkpoint_dir=checkpoint_dir if stall_timeout else None,
            stall_timeout=stall_timeout,
            # Echoed back in the event: the attempt's bookkeeping survives the deferral.
            extra={"attempt": _attempt_of(obj), "history": _history_of(obj), "target_step": target_step,
                   "checkpoint_dir": checkpoint_dir},
        )
        if self.deferrable:
            self.defer(trigger=trigger, method_name="execute_complete")
        # Synchronous path: the same trigger, run to its first event in this worker.
        return self.execute_complete(context, asyncio.run(_first_event(trigger)))

    def _this_tasks_jobsets(self, api, namespace: str, run_name: str,
                            run_labels: dict[str, str]) -> list[dict[str, Any]]:
        """This task's JobSets (every attempt), from one listing of the run name's JobSets.

        Two live JobSets of one run name would write the same checkpoints, so a live one of another DAG run or
        task (a new DAG run, or a re-run of `airflow dags test`) fails the try before anything is created.
        """
        selector = L.selector({L.RUN_NAME: run_labels[L.RUN_NAME], L.MANAGED_BY: L.MANAGED_BY_VALUE})
        mine = []
        for other in api.list(namespace, selector):
            labels = other["metadata"].get("labels") or {}
            if all(labels.get(key) == value for key, value in run_labels.items()):
                mine.append(other)
            elif not evaluate_jobset(other).ended:
                raise AirflowFailException(
                    f"run_name {run_name!r} already has a live JobSet {namespace}/{other['metadata']['name']} "
                    f"(DAG {labels.get(L.DAG_ID)}, run {labels.get(L.RUN_ID)}): two JobSets must not write the same "
                    "checkpoints; wait for it, delete it, or use another run_name"
                )
        return mine

    def _submit(self, api, slices, checkpointing, workload, run_labels, ti, history) -> dict[str, Any]:
        from mtc_provider.core.jobset import build_jobset

        name = attempt_name(workload.jobset_name, ti.dag_id, ti.run_id, ti.task_id, ti.try_number)
        labels = {**run_labels, L.TRY_NUMBER: str(ti.try_number)}
        try:
            body = build_jobset(slices, checkpointing, dataclasses.replace(workload, jobset_name=name), labels,
                                CustomizationSpec.from_value(self.customization))
        except SpecError as exc:
            raise AirflowFailException(f"invalid spec: {exc}") from exc
        body["metadata"].setdefault("annotations", {})[STEP_HISTORY_ANNOTATION] = json.dumps(history)
        if self.fault_plan:
            from mtc_provider.local.runner.manifest import FAULT_PLAN_ANNOTATION

            body["metadata"]["annotations"][FAULT_PLAN_ANNOTATION] = json.dumps(self.fault_plan)
        try:
            created = api.create(workload.namespace, body)
            self.log.info("submitted JobSet %s/%s (attempt %s, newest finalized step %s)",
                          workload.namespace, name, ti.try_number, history[-1])
            return created
        except AlreadyExists:
            existing = api.get(workload.namespace, name)
            mine = all((existing["metadata"].get("labels") or {}).get(k) == v for k, v in run_labels.items())
            if not mine:
                raise AirflowFailException(f"JobSet name {name} is taken by a JobSet of another run")
            self.log.info("JobSet %s already exists for this try: reattaching", name)
            return existing
        except ApiError as exc:
            decision = decide_rejected(exc.status, str(exc))
            if decision.kind == FAIL:
                raise AirflowFailException(decision.reason) from exc
            raise JobSetAttemptFailed(decision.reason) from exc

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        ev = JobSetEvent.from_payload(event)
        extra = ev.extra
        connection = self._current[0] if self._current else jobset_factory.connection_for(
            self.target, self.kubernetes_conn_id)
        store = self._store(extra["checkpoint_dir"])
        self._current = None
        if ev.kind == ENDED and ev.state is not None:
            return self._finish(context, connection, ev.state, extra["attempt"], extra["history"], store,
                                extra["checkpoint_dir"], extra["target_step"], ev.restarts_seen)
        latest = self._latest(store, extra["checkpoint_dir"])
        self._push(context, ev.namespace, ev.name, extra["attempt"], ev.restarts_seen, latest, ev.message or ev.kind)
        if ev.kind == DELETED:
            raise AirflowFailException(f"JobSet {ev.namespace}/{ev.name} was deleted outside this task")
        if ev.kind == STALLED:
            self.log.warning("attempt stalled (%s): deleting JobSet %s so the next try resubmits", ev.message, ev.name)
            jobset_factory.jobset_api(connection).delete(ev.namespace, ev.name)
            raise JobSetAttemptFailed(ev.message)
        raise JobSetAttemptFailed(f"lost track of JobSet {ev.namespace}/{ev.name}: {ev.message}")  # ERROR

    def _finish(self, context, connection, state: JobSetState, attempt: int, history: list[int | None],
                store: CheckpointStore | None, checkpoint_dir: str, target_step: int, restarts: int) -> Any:
        latest = self._latest(store, checkpoint_dir)
        if self._completion:
            decision = decide_on_completion(state)
        else:
            decision = decide(state, latest, target_step, history or [None], self.crash_loop_attempts)
        self.log.info("%s; newest finalized step %s of %s -> %s: %s", state.describe(), latest, target_step,
                      decision.kind, decision.reason)
        if decision.kind != SUCCEED:  # why the attempt died, one click away: bounded tails of the failed pods
            log_failed_pod_tails(self.log, jobset_factory.jobset_api(connection), state.namespace, state.name)
        result = self._push(context, state.namespace, state.name, attempt, restarts, latest, decision.reason)
        if decision.kind == SUCCEED:
            return result
        if decision.kind == FAIL:
            raise AirflowFailException(decision.reason)
        raise JobSetAttemptFailed(decision.reason)

    def _push(self, context, namespace, name, attempt, restarts, latest, reason) -> dict[str, Any]:
        result = {"jobset_name": name, "namespace": namespace, "attempt": attempt, "restarts": restarts,
                  "last_step": latest, "reason": reason}
        context["ti"].xcom_push(key=XCOM_KEY, value=result)
        return result

    def on_kill(self) -> None:
        """A user marked the running (synchronous) task failed or cleared it: stop the JobSet."""
        if self._current:
            connection, namespace, name = self._current
            self.log.info("task killed: deleting JobSet %s/%s (checkpoints are kept)", namespace, name)
            jobset_factory.jobset_api(connection).delete(namespace, name)


async def _first_event(trigger: JobSetTrigger) -> dict[str, Any]:
    async for event in trigger.run():
        return event.payload
    return JobSetEvent(ERROR, trigger.namespace, trigger.name, message="the watch ended without an event").to_payload()


class MtcDeleteJobSetOperator(BaseOperator):
    """Delete a run's JobSets (by name, or every attempt of a run by run labels); checkpoints are kept.

    Use as a teardown (`.as_teardown(setups=launch)`) so slices are freed whatever happened.

    :param namespace: the JobSets' namespace.
    :param name: delete this JobSet; or leave it out and give run_name + launch_task_id.
    :param target: GkeTarget, LocalTarget or a dict (kind gke|local); None is the local target.
    :param kubernetes_conn_id: use this cncf.kubernetes connection instead of GKE credentials.
    :param run_name: with launch_task_id: delete every attempt the launch task made for this run name.
    :param launch_task_id: the task id of the MtcJobSetOperator whose attempts to delete.
    """

    template_fields: Sequence[str] = ("name", "namespace", "target", "run_name", "launch_task_id")

    def __init__(self, *, namespace: str = "default", name: str | None = None, target: Any = None,
                 kubernetes_conn_id: str | None = None, run_name: str | None = None,
                 launch_task_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.namespace = namespace
        self.name = name
        self.target = target
        self.kubernetes_conn_id = kubernetes_conn_id
        self.run_name = run_name
        self.launch_task_id = launch_task_id

    def execute(self, context: Any) -> list[str]:
        if not self.name and not (self.run_name and self.launch_task_id):
            raise AirflowFailException(str(SpecError("name", self.name, "a JobSet name, or run_name + launch_task_id")))
        api = jobset_factory.jobset_api(jobset_factory.connection_for(self.target, self.kubernetes_conn_id))
        if self.name:
            names = [self.name]
        else:
            ti = context["ti"]
            selector = L.selector(L.run_labels(ti.dag_id, ti.run_id, self.launch_task_id, self.run_name))
            names = [o["metadata"]["name"] for o in api.list(self.namespace, selector)]
        for name in names:
            self.log.info("deleting JobSet %s/%s", self.namespace, name)
            api.delete(self.namespace, name)
        return names
