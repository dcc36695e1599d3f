"""Launch a training JobSet, follow it, and let Airflow's retries resubmit it until training reaches its target.

One try of the task is one attempt, or several when an attempt is interrupted after progress. A try first looks for
its run's JobSets by label: a live one is reattached to (never a second JobSet), an ended one is deleted (its
checkpoints stay) and the next attempt, `<jobset_name>-<run hash>-a<attempt>`, resumes from the newest checkpoint.
One lock object per run name (adapters.run_lock) makes "no other writer" atomic and keeps the step history and the
attempt records (adapters.attempt_journal). What a try does is decided by pure functions (core.attempt.launch
.plan_launch; at an attempt's end core.attempt.resubmission and core.attempt.attempt_records.end_of_attempt); the
launch's steps are operators.jobset_launch, the end's operators.jobset_end.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from airflow.sdk import conf
from airflow.sdk.exceptions import AirflowFailException

from mtc_provider.adapters import metrics
from mtc_provider.adapters.attempt_journal import (ATTEMPTS_XCOM_KEY, PROGRESS_XCOM_KEY,  # noqa: F401
                                                   AttemptJournal, RunRecordPlace, write_run_record)
from mtc_provider.adapters.kubernetes import Forbidden
from mtc_provider.adapters.protocols import CheckpointStore
from mtc_provider.adapters.retry import ApiUnreachable, PermissionDenied
from mtc_provider.adapters.run_lock import ATTEMPTS, HISTORY, LockHeld, RunLock
from mtc_provider.core.attempt.attempt_records import AttemptRecord
from mtc_provider.core.attempt.jobset_events import API_UNREACHABLE, ENDED, NEXT_ATTEMPT_PENDING, JobSetEvent
from mtc_provider.core.attempt.launch import (attempt_of, history_of, needs_latest_step, next_attempt,
                                              open_attempt_of_try, plan_launch)
from mtc_provider.core.attempt.launch_options import (OPTION_DEFAULTS, WAIT_FOR_COMPLETION, LaunchOptions,
                                                      settings_signature)
from mtc_provider.core.attempt.ownership import describe_owner, foreign_event, owner_gone
from mtc_provider.core.attempt.ownership import task_owner as _owner
from mtc_provider.core.attempt.resubmission import REATTACH, TAKE_RESULT, WAIT_DELETION
from mtc_provider.core.attempt.run_summary import RUNNING
from mtc_provider.core.attempt.status import evaluate_jobset
from mtc_provider.core.basics import labels as L
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.definition.render.customization import CustomizationSpec
from mtc_provider.core.definition.description.jobset_names import attempt_name  # noqa: F401 - users import it from here
from mtc_provider.core.definition.shape.tpu import SliceSpec
from mtc_provider.links.jobset import JOBSET_LINKS, created_at, persist_links
from mtc_provider.operators.base import JOBSET_TARGET_FIELDS, JobSetTargetMixin
from mtc_provider.operators.delete_jobset import MtcDeleteJobSetOperator, kept_failed  # noqa: F401 - users import it
from mtc_provider.operators.jobset_end import (MAX_WATCH_FAILURES, TryFacts, end_by_kill,  # noqa: F401
                                               fault_on_last_try, keep_for_teardown, last_try, max_tries,
                                               next_attempt_pending, open_journal, push_run, record_run, settle,
                                               ti_run_name, watch_failed, write_record)
from mtc_provider.operators.jobset_failures import (  # noqa: F401 - names users import from here
    JOBSET_KEPT_XCOM_KEY, NOT_AN_ATTEMPT, ApiUnreachableFailure, JobSetAttemptFailed, JobSetForbidden,
    NextAttemptInTry, OrchestratorFault, ResubmissionPolicy, StorageForbidden, forbidden, storage_forbidden)
from mtc_provider.operators.jobset_launch import (attempt_body, first_event, latest_step, next_in_trigger,
                                                  sections, submit, watch_trigger)
from mtc_provider.targets import backend_for

if TYPE_CHECKING:  # the spec and the trigger are imported where they run: DAG files stay light
    from mtc_provider.core.definition.description.spec import CheckpointingSpec, WorkloadSpec
    from mtc_provider.hooks.jobset import MtcJobSetHook
    from mtc_provider.triggers.jobset import JobSetTrigger


class MtcJobSetOperator(JobSetTargetMixin):
    """Run multi-slice training as a JobSet with the MTC ramdisk until it reaches `target_step`.

    :param slices: SliceSpec or dict (tpu_type, topology, num_slices, machine_type).
    :param checkpointing: CheckpointingSpec or dict (run_name, base_output_directory, steps, MaxText flags).
    :param workload: WorkloadSpec or dict (jobset_name, image, command, namespace, max_restarts, ...).
    :param deferrable: wait in the triggerer (default: Airflow's operators.default_deferrable).
    :param checkpoint_store_factory: (checkpoint_dir, gcp_conn_id) -> CheckpointStore; default open_store.
    :param customization: CustomizationSpec or dict: Kueue queue and priority, spot or reserved capacity, extra
        volumes, env from Secrets/ConfigMaps (references only), /dev/shm size, validated overrides
        (see core.definition.render.customization).
    :param retries: resubmissions allowed (each Airflow retry submits the next attempt).
    :param retry_delay: wait before the first resubmission.
    :param retry_exponential_backoff: multiply the wait by this factor after each attempt.
    :param max_retry_delay: the longest wait between attempts.
    :param bool next_attempt_in_trigger: after an interruption or a stall with progress the trigger submits the next
        attempt itself, without a worker slot (deferrable training runs; default on). False: the task resumes on a
        worker for each (a slot, a task process and the provider's imports per interruption; docs/benchmarks.md, 10).

    :param int target_step: the step that means "done"; default `checkpointing.steps`.
    :param int crash_loop_attempts: fail for good after this many consecutive attempts without checkpoint progress
        (a stalled attempt counts like a failed one).
    :param float poll_interval: seconds between polls when the watch cannot be used, and between stall checks.
    :param float stall_timeout: seconds without progress (the workload's steps, MTC replicator backups, finalized
        checkpoints) before the attempt counts as stalled: deleted and resubmitted. "derived": from the run's cadence
        (core.measure.cadence), re-derived from its step time; a value shorter than every signal's gap is refused.
    :param dict stall_cadence: the plan's cadence (core.definition.description.run.stall_rule) when its stall_timeout
        was derived: the trigger re-derives the limit from it (templated); None: stall_timeout as given.
    :param float startup_timeout: seconds each start of the pods may take until every pod runs before the run fails;
        None: wait for ever, logging "waiting for capacity" every `capacity_log_interval` seconds.
    :param float image_pull_timeout: seconds a start of the pods may keep failing to pull its image or create its
        container (ErrImagePull, ImagePullBackOff, CreateContainerError: Kubernetes retries these with back-off)
        before the run fails with the pod's message (templated; default 900: a replacement node pulling a large
        image). What cannot heal (InvalidImageName, a missing Secret or ConfigMap) fails at once. None: no bound.
    :param float capacity_log_interval: seconds between "waiting for capacity: k of n pods scheduled" lines.
    :param float first_step_floor: the least time a start of the pods may take from running to its first reported step
        before it counts as stalled (templated; default 1800: a large slice's restore and compilation). Once the
        workload has reported steps in this attempt, each later start gets 3 x the longest time to first step
        measured so far, never less than this (core.measure.cadence.first_step_limit).
    :param int budget_interruptions: the run ends for good when its newest this-many interruptions (attempt ends
        and in-cluster restarts) gained no more than `min_steps_per_interruption` restorable steps each (templated;
        default 6; 0: no such rule). Restorable: what the next start can resume from (docs/resubmission.md).
    :param int min_steps_per_interruption: restorable steps an interruption must gain on average (templated; default
        "derived": the run's shortest restorable save period, e.g. `local_checkpoint_period` in emergency mode).
    :param float min_goodput: the run ends for good when the restorable steps gained over the last `goodput_window`
        seconds, at the step time it reports, are under this share of that time (templated; default 0.1; 0: no
        such rule). Judged once the run has lasted the window.
    :param float goodput_window: seconds the goodput rule looks back over (templated; default 21600, six hours).
    :param float listing_timeout: seconds the checkpoint listing may keep failing (403, 429, 503, timeouts) before the
        try fails with the bucket and the HTTP status; training is not touched meanwhile.
    :param float progress_interval: seconds between progress lines in the task log while the run trains (step N of
        T, steps/h, ETA, newest checkpoint, restarts; docs/operators/jobset.md), each also pushed to XCom key
        `progress`. None or 0: no lines.
    :param bool pod_logs: stream the leader pod's log into the task's log while the trigger waits (templated; default
        on). Bounded: at most `pod_logs_max_lines` lines and `pod_logs_max_bytes` bytes every `pod_logs_interval`
        seconds (the newest; a line counts what was left out).
    :param float pod_logs_interval: seconds between reads of the leader pod's log (templated; default 30).
    :param int pod_logs_max_lines: lines per read at most (templated; default 100).
    :param int pod_logs_max_bytes: bytes per read at most (templated; default 32768).
    :param float deletion_timeout: seconds a try waits for a terminating JobSet of this task to go before submitting.
    :param float api_outage_timeout: seconds of continuous Kubernetes API outage (429, 5xx, refused or hanging
        connections) that the watch and every request wait out, with backoff honouring Retry-After, before the task
        fails for good naming the API and its last answer. An outage is not an attempt: it spends no Airflow
        retry, and the JobSet is never deleted for it (clear the task to reattach). Default one hour.
    :param str wait_for: "checkpoint" (training: done when the newest finalized checkpoint reaches `target_step`)
        or "completion" (a one-shot job such as an evaluation: done when the JobSet completes; no checkpoint
        store is read, no stall or crash-loop detection; a retryable failure is still resubmitted).
    :param list fault_plan: local target only: faults the runner injects into the run (a list of
        {kind, at_step|at_seconds, slice, host}, or {seed, faults}); each fires once per training run.
    :param int keep_failed_attempts: how many of the newest failed attempts' JobSets stay in the cluster (with their
        pods' logs) for debugging when the next attempt is submitted (templated; default 0); the teardown or
        `mtc delete RUN --attempt N` deletes them. Every delete and every kept JobSet is logged with who asked.

    The settings (from target_step on) are parsed once per try (core.attempt.launch_options.LaunchOptions). Where it
    runs: target, kubernetes_conn_id and the google provider's parameters, as JobSetTargetMixin takes them.
    """

    template_fields: Sequence[str] = (
        "slices", "checkpointing", "workload", *JOBSET_TARGET_FIELDS, "target_step",
        "fault_plan", "stall_timeout", "startup_timeout", "poll_interval", "customization", "progress_interval",
        "image_pull_timeout", "api_outage_timeout", "wait_for", "crash_loop_attempts", "listing_timeout",
        "deletion_timeout", "capacity_log_interval", "keep_failed_attempts", "pod_logs", "pod_logs_interval",
        "pod_logs_max_lines", "pod_logs_max_bytes", "stall_cadence", "first_step_floor", "budget_interruptions",
        "min_steps_per_interruption", "min_goodput", "goodput_window",
    )
    template_fields_renderers = {"slices": "json", "checkpointing": "json", "workload": "json"}
    operator_extra_links = JOBSET_LINKS
    shallow_copy_attrs: Sequence[str] = ("hook", "_journal")  # clients hold locks: a copied task shares them
    ui_color = "#d9ead3"

    def __init__(self, *, slices: SliceSpec | Mapping[str, Any], checkpointing: CheckpointingSpec | Mapping[str, Any],
                 workload: WorkloadSpec | Mapping[str, Any],
                 customization: CustomizationSpec | Mapping[str, Any] | None = None,
                 deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
                 checkpoint_store_factory: Callable[[str, str], CheckpointStore] | None = None, retries: int = 6,
                 retry_delay: timedelta = timedelta(seconds=30), retry_exponential_backoff: float = 2.0,
                 max_retry_delay: timedelta = timedelta(minutes=30), next_attempt_in_trigger: bool = True,
                 **kwargs: Any) -> None:
        # The settings (core.attempt.launch_options.OPTION_DEFAULTS) are kept as given (templates render them).
        settings = {name: kwargs.pop(name, default) for name, default in OPTION_DEFAULTS.items()}
        if ResubmissionPolicy is not None and kwargs.get("retry_policy") is None:
            kwargs["retry_policy"] = ResubmissionPolicy()  # an expected resubmission's retry carries its reason
        super().__init__(retries=retries, retry_delay=retry_delay, retry_exponential_backoff=retry_exponential_backoff,
                         max_retry_delay=max_retry_delay, **kwargs)
        self.slices, self.checkpointing, self.workload = slices, checkpointing, workload
        self.customization, self.deferrable = customization, deferrable
        self.checkpoint_store_factory = checkpoint_store_factory
        if not isinstance(next_attempt_in_trigger, bool):
            raise SpecError("next_attempt_in_trigger", next_attempt_in_trigger, "true or false")
        self.next_attempt_in_trigger = next_attempt_in_trigger
        for name, value in settings.items():
            setattr(self, name, value)
        self._options: LaunchOptions | None = None  # the settings of this try, parsed (_parse_options)
        self._described: tuple[Any, ...] | None = None  # the specs of the rendered arguments, once per try (_describe)
        self._journal: AttemptJournal | None = None  # this try's attempt journal (_journal_for)
        # (connection, namespace, name, ti ids) for on_kill
        self._current: tuple[dict[str, Any], str, str, dict[str, Any]] | None = None

    # Airflow reads the signature (default_args, partial/expand): the settings are keyword arguments like the others.
    __init__.__signature__ = settings_signature(__init__)

    # --- inputs -------------------------------------------------------------------------------------
    def _describe(self, target_kind: str | None = None) -> tuple[SliceSpec, CheckpointingSpec, WorkloadSpec,
                                                                  CustomizationSpec]:
        """The sections this operator launches, validated once per try (operators.jobset_launch.sections)."""
        if self._described is None:
            self._described = sections((self.slices, self.checkpointing, self.workload, self.customization),
                                       target_kind or self._target().kind)
        return self._described

    def _specs(self, ti: Any | None = None) -> tuple[SliceSpec, CheckpointingSpec, WorkloadSpec, int]:
        """This try's sections and settings validated, and its JobSet rendered, once: a refusal fails here."""
        self._described = self._options = None  # this try's arguments, as rendered for it
        try:
            slices, checkpointing, workload, customization = self._describe(self._target().kind)
            options = self._parse_options(say_warnings=True)
            self._rendered = attempt_body(slices, checkpointing, workload, customization, ti)
            backend_for(self._target()).put_fault_plan(self._rendered[1], options.fault_plan)
        except (SpecError, ValueError) as exc:
            raise AirflowFailException(f"invalid spec: {exc}") from exc
        return slices, checkpointing, workload, options.target_step

    def _parse_options(self, say_warnings: bool = False) -> LaunchOptions:
        """The settings from the rendered fields, once per try (core.attempt.launch_options); warnings said once."""
        if self._options is None:
            target = self._target()
            _, checkpointing, workload, _ = self._describe(target.kind)
            self._options, warnings = LaunchOptions.parse(
                {name: getattr(self, name) for name in OPTION_DEFAULTS}, default_target_step=checkpointing.steps,
                kind=target.kind, checkpointing=checkpointing, workload=workload)
            for warning in warnings if say_warnings else ():
                self.log.warning("%s", warning)
        return self._options

    @property
    def _opts(self) -> LaunchOptions:
        """The parsed settings (a resumed try parses them again from the same rendered fields)."""
        try:
            return self._parse_options()
        except (SpecError, ValueError) as exc:
            raise AirflowFailException(f"invalid spec: {exc}") from exc

    def _google(self) -> tuple[str, Any]:
        """(gcp_conn_id, impersonation_chain) for every GCS read; the target's unless set on the operator."""
        gcp_conn_id, impersonation_chain = backend_for(self._target()).google()
        return self.gcp_conn_id or gcp_conn_id, self.impersonation_chain or impersonation_chain

    @property
    def _completion(self) -> bool:
        return self.wait_for == WAIT_FOR_COMPLETION

    def _latest(self, store: CheckpointStore | None, checkpoint_dir: str) -> int | None:
        """The newest restorable step (operators.jobset_launch.latest_step), listing outages waited out."""
        try:
            slices, checkpointing = self._describe()[:2]
        except (SpecError, ValueError):  # the sections were already checked where it matters (execute)
            slices, checkpointing = None, None
        return latest_step(store, checkpoint_dir, slices, checkpointing, self._opts.times.listing_timeout, self.log)

    def _store(self, checkpoint_dir: str) -> CheckpointStore | None:
        if self._completion:
            return None
        gcp_conn_id, impersonation_chain = self._google()
        if self.checkpoint_store_factory is not None:
            return self.checkpoint_store_factory(checkpoint_dir, gcp_conn_id)
        from mtc_provider.adapters.checkpoint_stores import open_store

        return open_store(checkpoint_dir, gcp_conn_id=gcp_conn_id, impersonation_chain=impersonation_chain)

    @cached_property
    def hook(self) -> MtcJobSetHook:
        """The JobSet client of this try (hooks.jobset), waiting an unreachable API out for api_outage_timeout."""
        from mtc_provider.hooks.jobset import MtcJobSetHook

        hook = MtcJobSetHook(connection=self._connection(), api_outage_timeout=self._opts.times.api_outage_timeout)
        hook._log = self.log  # its lines (waiting for a deletion, a reattach) are this task's, as before the move
        return hook

    # --- execute ------------------------------------------------------------------------------------
    def execute(self, context: Any) -> Any:
        # An attempt interrupted after progress is followed in this same try (NextAttemptInTry): a loop, not a
        # recursion, so a synchronous try survives any number of them.
        outer, self._in_execute = getattr(self, "_in_execute", False), True
        try:
            while True:
                try:
                    return self._guarded(context, lambda: self._execute(context))
                except NextAttemptInTry:
                    if outer:  # an execute further out loops (execute_complete -> execute -> ...)
                        raise
        finally:
            self._in_execute = outer

    def _execute(self, context: Any) -> Any:
        ti = context["ti"]
        slices, checkpointing, workload, target_step = self._specs(ti)
        run_labels = L.run_labels(ti.dag_id, ti.run_id, ti.task_id, checkpointing.run_name)
        namespace = workload.namespace
        connection = self.hook.connection
        store = self._store(checkpointing.checkpoint_directory)  # None: completion mode
        lock = self.hook.run_lock(namespace, checkpointing.run_name, run_labels, _owner(ti))
        try:
            lock_data = lock.acquire(owner_gone=self._owner_gone, checkpoint_dir=checkpointing.checkpoint_directory)
        except Forbidden as exc:
            raise forbidden(str(exc)) from exc
        except LockHeld as exc:
            if exc.directory:
                raise AirflowFailException(
                    f"{exc}: two JobSets must not write the same checkpoints; wait for that run, use another "
                    f"checkpoint directory, or, if you know that run is gone, free the directory: mtc unlock "
                    f"--checkpoint-dir {exc.directory} (logged; it takes the directory over from its holder; or "
                    f"kubectl delete configmap -n {exc.where.replace('/', ' ', 1)})") from None
            raise AirflowFailException(
                f"run_name {checkpointing.run_name!r} is held by DAG {exc.holder.get(L.DAG_ID)}, run "
                f"{exc.holder.get(L.RUN_ID)}, task {exc.holder.get(L.TASK_ID)} (lock {namespace}/{lock.name}; "
                f"{exc.why or 'its owner is not provably gone'}): two JobSets must not write the same checkpoints; "
                "wait for that run, use another run_name, or, if you know that run is gone, free the run name: "
                f"mtc unlock {checkpointing.run_name} -n {namespace} (or kubectl delete configmap -n {namespace} "
                f"{lock.name})") from None
        if lock.taken_over:
            self.log.warning("run lock %s/%s taken over: %s", namespace, lock.name, lock.taken_over)

        try:
            return self._run_try(context, ti, connection, store, lock, lock_data, slices, checkpointing,
                                 workload, target_step, run_labels)
        except OrchestratorFault:
            raise  # a 403, an outage, a lost watch: the JobSet may be training; never release or delete anything
        except Forbidden as exc:
            raise forbidden(str(exc)) from exc
        except PermissionDenied as exc:  # the storage's 403 for Airflow's identity (the cluster's is Forbidden)
            raise storage_forbidden(exc, checkpointing.checkpoint_directory, *self._google()) from exc
        except AirflowFailException:
            lock.release()  # refused or failed for good: the run name is free again
            raise

    def _run_try(self, context, ti, connection, store, lock, lock_data, slices, checkpointing, workload,
                 target_step, run_labels) -> Any:
        from mtc_provider.hooks.jobset import StillTerminating

        namespace, checkpoint_dir = workload.namespace, checkpointing.checkpoint_directory
        while True:
            found = self.hook.this_tasks_jobsets(namespace, checkpointing.run_name, run_labels)
            latest, known = None, getattr(self, "_listed_at_end", None)
            if needs_latest_step(found):  # the step the previous attempt's end was decided on (listed once), else now
                self._listed_at_end = None
                latest = self._latest(store, checkpoint_dir) if known is None else known[0]
            plan = plan_launch(found, lock_data[HISTORY], latest, target_step, self._completion,
                               lock_data[ATTEMPTS])
            if plan.kind != WAIT_DELETION:
                break
            try:
                self.hook.wait_for_deletion(namespace, plan.waiting_for, self._opts.times.deletion_timeout,
                                            self._opts.times.poll_interval)
            except StillTerminating as exc:
                raise JobSetAttemptFailed(str(exc)) from None

        by_name = {o["metadata"]["name"]: o for o in found}
        own = open_attempt_of_try(found, lock_data[ATTEMPTS], ti.try_number)
        history, previous_step, records = list(plan.history), plan.start_step, lock_data[ATTEMPTS]
        ended = {"target_step": target_step, "checkpoint_dir": checkpoint_dir, "run_name": checkpointing.run_name,
                 "namespace": namespace}  # an ended attempt found here is closed as its trigger's event would be
        if plan.kind not in (REATTACH, TAKE_RESULT) and own is not None and evaluate_jobset(own).ended:
            # This try's own attempt ended while the try was not watching it (the try watches it again after an
            # event that was not its own, or a failed trigger): that end decides the try, as its trigger's event
            # would have; it is never deleted and resubmitted under its own name.
            obj, why = own, "of this try already ended (%s): its end decides this try"
            ended.update(attempt=attempt_of(own), history=list(lock_data[HISTORY]) or history_of(own),
                         budget=self._budget_check(records, own["metadata"]["name"]))
        elif plan.kind == TAKE_RESULT:
            obj, why = by_name[plan.name], "already ended (%s) with training done: taking its result"
            ended.update(attempt=plan.attempt, history=history)
        if "attempt" in ended:
            state = evaluate_jobset(obj)
            self.log.info("JobSet %s %s", state.name, why % state.phase)
            return self._end_attempt(context, JobSetEvent(ENDED, namespace, state.name, state, state.restarts,
                                                          extra=ended))
        kill_ids = {**_owner(ti), "run_name": checkpointing.run_name}  # what on_kill needs of the watched attempt
        journal = self._journal_for(context, lock, namespace, checkpoint_dir, target_step)
        if plan.kind == REATTACH:
            obj = by_name[plan.name]
            self._current = (connection, namespace, plan.name, kill_ids)
            self.log.info("reattaching to JobSet %s/%s (attempt %s), not creating another",
                          namespace, plan.name, plan.attempt)
        else:
            number = next_attempt(found, lock_data[ATTEMPTS], ti.try_number)  # one try may submit several
            self.hook.delete_ended(self.log, by_name, plan.to_delete, self._opts.keep_failed_attempts,
                                   f"{describe_owner(_owner(ti))}, before attempt {number}", checkpointing.run_name,
                                   namespace)
            obj = submit(self.hook, self.log, self._rendered, workload.jobset_name, namespace, run_labels, _owner(ti),
                         number, history)
            # From its create on, a kill (on_kill) must know this attempt: its records are written next.
            self._current = (connection, namespace, obj["metadata"]["name"], kill_ids)
            record = AttemptRecord(attempt=number, try_number=ti.try_number, jobset=obj["metadata"]["name"],
                                   start=time.time(), last_step=previous_step)
            records = journal.open(record, history)
            write_run_record(journal.run_record, RUNNING, "attempt submitted", records, None, self.log)
            metrics.attempt_submitted(metrics.tags(ti.dag_id, ti.task_id, checkpointing.run_name,
                                                   connection.get("kind")), lock_data[ATTEMPTS], record.start)
        name = obj["metadata"]["name"]
        persist_links(context, self._target(), namespace, name, checkpoint_dir, start=created_at(obj, time.time()),
                      replicated_job=workload.replicated_job_name)
        push_run(ti, lock, checkpoint_dir, target_step, checkpointing.run_name)
        trigger = watch_trigger(
            connection, namespace, obj, None if self._completion else checkpointing, slices, self._google(),
            self._opts.watch(), extra={"attempt": attempt_of(obj), "history": history, "target_step": target_step,
                   "checkpoint_dir": checkpoint_dir, "run_name": checkpointing.run_name, "namespace": namespace,
                   # a plain retry may end in the triggerer (triggers.attempt_end); never the last try
                   "end_retry_in_trigger": bool(self.deferrable) and not last_try(ti, self.retries),
                   "crash_loop_attempts": self._opts.crash_loop_attempts, "completion": self._completion,
                   # the run's budget and the attempts before this one: both ends judge its end from these
                   "budget": self._budget_check(records, name),
                   # the try that deferred: an event Airflow resumes another try with is not that try's end
                   "owner": _owner(ti), "max_tries": max_tries(ti, self.retries),
                   # the attempt journal the triggerer's end of a retry writes through, as the worker's does
                   "journal": journal.settings(),
                   **self._next_in_trigger(workload)})
        if self.deferrable:
            self.defer(trigger=trigger, method_name="execute_complete")
        # Synchronous path: the same trigger, run to its first event in this worker.
        return self.execute_complete(context, asyncio.run(first_event(trigger)))

    def _next_in_trigger(self, workload: WorkloadSpec) -> dict[str, Any]:
        """The trigger's leave to submit this try's next attempt (none for a synchronous try or a one-shot job)."""
        if not (self.next_attempt_in_trigger and self.deferrable) or self._completion:
            return {}
        return next_in_trigger(self._rendered, workload, backend_for(self._target()).console,
                               self._opts.keep_failed_attempts)

    def _budget_check(self, records: Sequence[Mapping[str, Any]], jobset: str) -> dict[str, Any] | None:
        """The run's budget for this attempt's end (core.attempt.budget); None in completion mode."""
        if self._completion:
            return None
        from mtc_provider.core.attempt.budget import BudgetCheck
        from mtc_provider.core.measure.cadence import step_seconds_of

        return BudgetCheck.for_attempt(self._opts.budget, records, jobset, step_seconds_of(
            self._target().kind, None, self._describe()[2].extra_flags)).to_dict()

    # --- the end of an attempt: execute_complete -> _end_attempt -> _apply_end -> operators.jobset_end.settle (judge,
    # the journal's close, conclude) -------------------------------------------------------------------------
    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        """The trigger's event: this attempt's end, unless it is another try's (then this try watches again)."""
        ti = context.get("ti") if isinstance(context, Mapping) else None
        foreign = foreign_event((event.get("extra") or {}).get("owner"), _owner(ti)) if ti is not None else ""
        if foreign:  # not this attempt's end, whatever it says: this try's own JobSet is watched again
            return self._watch_again(context, f"{foreign}; its {event.get('kind')} of JobSet "
                                              f"{event.get('namespace')}/{event.get('name')} is not this try's")
        return self._guarded(context, lambda: self._end_attempt(context, JobSetEvent.from_payload(event)))

    def _guarded(self, context: Any, call: Callable[[], Any]) -> Any:
        """An outage, or an unexpected error on the last try, is the orchestrator's fault: the teardown keeps the
        JobSet (operators.jobset_end.fault_on_last_try, keep_for_teardown)."""
        ti = context.get("ti") if isinstance(context, Mapping) else None
        try:
            return call()
        except Exception as exc:
            if isinstance(exc, ApiUnreachable):  # not an attempt: no retry spent, the JobSet and the run lock untouched
                fault = ApiUnreachableFailure(f"{exc}: {NOT_AN_ATTEMPT}")
            else:
                fault = fault_on_last_try(exc, ti, self.retries, getattr(self, "_stopped_by_user", False), self.log)
            if isinstance(fault, OrchestratorFault):
                keep_for_teardown(ti, fault, self.log)
            if fault is exc:
                raise
            raise fault from exc

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Any) -> Any:
        """A trigger that failed (Airflow's `__fail__`: it raised, or exited without an event) lost the watch, not
        the attempt: the JobSet does not depend on its watcher. The try watches its JobSet again (a live one is
        reattached to, as a retry would, without spending the retry), at most MAX_WATCH_FAILURES times per try;
        then, and on a trigger timeout, Airflow's own handling (TaskDeferralError). The failure may not even be this
        try's: Airflow fails whatever is deferred on the failed trigger's id (core.attempt.ownership.foreign_event)."""
        from mtc_provider.adapters.airflow_private import trigger_failure

        failed, timed_out = trigger_failure()
        kwargs, ti = next_kwargs or {}, context.get("ti") if isinstance(context, Mapping) else None
        why = None if next_method != failed or kwargs.get("error") == timed_out or ti is None \
            else watch_failed(ti, kwargs, self.log)
        if why is None:
            return super().resume_execution(next_method, next_kwargs, context)
        return self._watch_again(context, why)

    def _watch_again(self, context: Any, why: str) -> Any:
        """Not this attempt's end: the try runs its launch again, which reattaches to its live JobSet (or takes
        the result of an ended one) and defers with a new trigger; nothing is deleted, no retry is spent."""
        self.log.warning("%s: not this attempt's end; this try watches its own JobSet again (no retry spent)", why)
        return self.execute(context)

    def _end_attempt(self, context: Any, ev: JobSetEvent) -> Any:
        """An attempt's end, from its trigger or found by this try: applied (`_apply_end`) and the run's state recorded;
        then the try ends, or goes on with the next attempt (deferred: this try submits it and defers again)."""
        try:
            if ev.kind in (API_UNREACHABLE, NEXT_ATTEMPT_PENDING):  # the JobSet is no longer this worker's to stop
                self._current = None
            if next_attempt_pending(ev, self.log):  # the worker submits the attempt the trigger could not
                return self.execute(context)
            ti, extra = context["ti"], ev.extra
            self._journal = None
            return record_run(lambda: self._apply_end(context, ev), lambda state, reason: write_record(
                self._journal, self._run_record_place(ti, ev.namespace, extra.get("checkpoint_dir"),
                                                      extra.get("target_step")), state, reason, ev.progress, self.log),
                last_try(ti, self.retries))
        except NextAttemptInTry:
            if getattr(self, "_in_execute", False):  # the synchronous path: execute's loop submits it
                raise
            return self.execute(context)  # deferred: this try submits the next attempt and defers again
        except Forbidden as exc:  # a 403 while closing the attempt: fail for good, delete nothing more
            raise forbidden(str(exc)) from exc
        except PermissionDenied as exc:  # the storage's 403 while reading the attempt's end
            raise storage_forbidden(exc, str(ev.extra.get("checkpoint_dir") or self._describe()[1]
                                             .checkpoint_directory), *self._google()) from exc

    def _apply_end(self, context: Any, ev: JobSetEvent) -> Any:
        """The attempt's end settled (operators.jobset_end.settle) with what this try knows: the newest restorable
        step (the trigger's verdict's, else listed here), its facts, the run lock and the attempt journal."""
        ti, extra = context["ti"], ev.extra
        if ev.progress:  # the trigger's latest progress figures, for dashboards and downstream tasks
            ti.xcom_push(key=PROGRESS_XCOM_KEY, value=ev.progress)
        store = self._store(extra["checkpoint_dir"])
        lock = self._lock_for(context, extra)
        self._current = None
        ended = ev.kind == ENDED and ev.state is not None
        if ended:  # a listing outage is waited out here; the trigger's verdict was made on its own listing
            latest = ev.verdict.get("latest_step") if ev.verdict else self._latest(store, extra["checkpoint_dir"])
        else:
            try:  # the step for the report line: a listing outage must not hide the attempt's own outcome
                latest = self._latest(store, extra["checkpoint_dir"])
            except Exception as exc:  # noqa: BLE001 - reported, then decided without the step
                self.log.warning("listing %s failed (%s): newest finalized step unknown", extra["checkpoint_dir"], exc)
                latest = None
        facts = TryFacts(ti.try_number, max_tries(ti, self.retries), last_try(ti, self.retries), self._completion,
                         self._opts.crash_loop_attempts)
        journal = self._journal_for(context, lock, ev.namespace, extra.get("checkpoint_dir"), extra.get("target_step"))
        try:
            return settle(ev, facts, latest, hook=self.hook, lock=lock, journal=journal, log=self.log,
                         google=self._google)
        except NextAttemptInTry:
            if ended:  # what the next attempt of this try plans from: listed once, for this end
                self._listed_at_end = (latest,)
            raise

    def _journal_for(self, context, lock: RunLock, namespace: str, checkpoint_dir: str | None,
                     target_step: int | None) -> AttemptJournal:
        """This try's attempt journal (operators.jobset_end.open_journal), kept for the run's record."""
        self._journal = open_journal(context["ti"], lock, self.log, self._run_record_place(
            context["ti"], namespace, checkpoint_dir, target_step), self._target, self._describe)
        return self._journal

    def _run_record_place(self, ti, namespace: str, checkpoint_dir: str | None,
                          target_step: int | None) -> RunRecordPlace | None:
        """Where the run's record goes (adapters.run_records); a one-shot job (an evaluation) writes none: the record
        beside the checkpoints it reads is the training run's."""
        if not checkpoint_dir or self._completion:
            return None
        return RunRecordPlace(checkpoint_dir, *self._google(), ti_run_name(self, checkpoint_dir), namespace,
                              target_step, _owner(ti))

    def _lock_for(self, context, extra: Mapping[str, Any]) -> RunLock:
        ti, run_name = context["ti"], extra.get("run_name") or self._describe()[1].run_name
        namespace = extra.get("namespace") or self._describe()[2].namespace
        return self.hook.run_lock(namespace, run_name, L.run_labels(ti.dag_id, ti.run_id, ti.task_id, run_name),
                                  _owner(ti))

    def _owner_gone(self, owner: Mapping[str, Any]) -> tuple[bool, str]:
        """Whether a run lock's owner is provably gone: Airflow (Task SDK) says its task ended or its run is gone."""
        from mtc_provider.adapters.task_state import try_lookup

        lookup, error = try_lookup(owner)
        return owner_gone(lookup, describe_owner(owner), error)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the run's checkpoint directory, read (a resubmission resumes from it) and written; in
        completion mode (an evaluation) only read (mtc_provider.lineage)."""
        from mtc_provider.lineage import operator_lineage

        directory = self._describe()[1].checkpoint_directory
        return operator_lineage(inputs=[directory], outputs=[] if self._completion else [directory])

    def _task_lookup(self):
        """(TaskLookup, "") for this try now, or (None, why it could not be read)."""
        from mtc_provider.adapters.task_state import try_lookup

        return try_lookup(self._current[3])

    def on_kill(self) -> None:
        """SIGTERM of a synchronous try: the JobSet is stopped only when Airflow confirms a user's action
        (operators.jobset_end.end_by_kill); a worker's own SIGTERM keeps it training for the next try."""
        if self._current:  # whatever the try raises next, a run ended by a confirmed user action was not a fault
            self._stopped_by_user = end_by_kill(*self._current, *self._task_lookup(), self.log)
