"""Launch a training JobSet, follow it, and let Airflow's retries resubmit it until training reaches its target.

One try of the task is one attempt. A try first looks for its run's JobSets by label (dag, run, task,
run name): a live one is reattached to (a worker that died, or a triggerer restart, never leads to a
second JobSet); an ended one is deleted (its checkpoints stay) and the next attempt is submitted with
the same run_name, so it resumes from the newest checkpoint. When the attempt ends, the newest
finalized checkpoint step decides (core.attempt.resubmission): succeed, retry (a retryable exception, so
Airflow's retries resubmit) or fail for good (AirflowFailException with the reason).

Attempt JobSets are named `<jobset_name>-<run hash>-a<attempt>`, and the run hash keeps two DAG runs apart.
A deleted JobSet stays (terminating) until its pods are gone: it is never reattached to; the next try
waits, bounded and logged, for it to go (its pods may still write checkpoints), then submits.

One lock object per run name (adapters.run_lock; a ConfigMap on GKE), created with create-if-absent
semantics, makes "no other writer" atomic: of two launches started together exactly one proceeds. It also
keeps what an attempt's deletion must not lose: the step history (newest finalized step when each attempt
started, for the crash-loop guard) and one record per attempt (core.attempt.attempt_records.AttemptRecord), written through
the attempt journal (adapters.attempt_journal) that the triggerer's end of a retry uses too. It is released when the
run ends for good.
What to do in a try is decided by pure functions (core.attempt.launch.plan_launch, core.attempt.resubmission.decide, decide_stalled).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import time
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from airflow.sdk.exceptions import AirflowFailException

from mtc_provider import targets
from mtc_provider.adapters import metrics
from mtc_provider.adapters.attempt_journal import ATTEMPTS_XCOM_KEY, XCOM_KEY, AttemptJournal  # noqa: F401
from mtc_provider.adapters.kubernetes import Forbidden
from mtc_provider.adapters.protocols import ApiError, CheckpointStore
from mtc_provider.adapters.retry import ApiUnreachable, PermissionDenied, Retryable, describe_failure
from mtc_provider.adapters.run_lock import ATTEMPTS, HISTORY, LockHeld, RunLock, lock_api
from mtc_provider.core.basics import labels as L
from mtc_provider.core.basics import vocabulary as V
from mtc_provider.core.attempt.attempt_records import AttemptRecord
from mtc_provider.core.definition.customization import CustomizationSpec
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.attempt.jobset_events import ERROR, JobSetEvent
from mtc_provider.core.definition.jobset_names import attempt_name
from mtc_provider.core.attempt.launch import attempt_of, history_of, needs_latest_step, next_attempt, plan_launch
from mtc_provider.core.attempt.launch_options import (OPTION_DEFAULTS, WAIT_FOR, WAIT_FOR_CHECKPOINT,  # noqa: F401
                                              WAIT_FOR_COMPLETION, LaunchOptions, keep_count, settings_signature)
from mtc_provider.core.attempt.ownership import describe_owner, kill_verdict, owner_gone
from mtc_provider.core.attempt.ownership import task_owner as _owner
from mtc_provider.core.attempt.resubmission import FAIL, REATTACH, TAKE_RESULT, WAIT_DELETION, decide_rejected
from mtc_provider.core.attempt.run_summary import RUNNING
from mtc_provider.core.attempt.status import evaluate_jobset
from mtc_provider.core.definition.tpu import SliceSpec
from mtc_provider.links.jobset import JOBSET_LINKS, created_at, persist_links
from mtc_provider.operators.base import JOBSET_TARGET_FIELDS, JobSetTargetMixin
from mtc_provider.operators.delete_jobset import MtcDeleteJobSetOperator, kept_failed  # noqa: F401 - its old home
from mtc_provider.operators.jobset_end import (  # noqa: F401 - names users import from here
    MAX_WATCH_FAILURES, PROGRESS_XCOM_KEY, RUN_XCOM_KEY, WATCH_FAILURES_XCOM_KEY, AttemptEndMixin, ti_run_name)
from mtc_provider.operators.jobset_failures import (  # noqa: F401 - names users import from here
    JOBSET_KEPT_XCOM_KEY, NOT_AN_ATTEMPT, ApiUnreachableFailure, JobSetAttemptFailed, JobSetForbidden,
    NextAttemptInTry, OrchestratorFault, ResubmissionPolicy, StorageForbidden, forbidden, storage_forbidden)
from mtc_provider.targets import backend_for

if TYPE_CHECKING:  # the spec and the trigger are imported where they run: DAG files stay light
    from mtc_provider.core.definition.spec import CheckpointingSpec, WorkloadSpec
    from mtc_provider.hooks.jobset import MtcJobSetHook
    from mtc_provider.triggers.jobset import JobSetTrigger

try:
    from airflow.sdk.configuration import conf
except ImportError:  # pragma: no cover - older Airflow
    from airflow.configuration import conf

STEP_HISTORY_ANNOTATION = f"{L.PREFIX}/step-history"
def _spec(kind: type, section: str, value: Any) -> Any:
    """A spec object or a plain dict (DAG params), through the run description's one dict-to-spec function."""
    from mtc_provider.core.definition.spec import spec_from_dict

    return spec_from_dict(kind, section, value)


def _attempt_body(slices: SliceSpec, checkpointing: CheckpointingSpec, workload: WorkloadSpec,
                  customization: CustomizationSpec, ti: Any | None, attempt: int | None = None
                  ) -> tuple[str, dict[str, Any]]:
    """The try's JobSet, rendered once per try (before any side effect, so a refusal costs nothing) and again with
    the attempt's own number when it is submitted (one try may submit several attempts): its attempt name and
    labels come from the task instance; without one (a bare validation) the run's own name."""
    from mtc_provider.core.definition.jobset_manifest import build_jobset

    if ti is None:
        name, labels = workload.jobset_name, None
    else:
        number = attempt or ti.try_number
        name = attempt_name(workload.jobset_name, ti.dag_id, ti.run_id, ti.task_id, number)
        labels = {**L.run_labels(ti.dag_id, ti.run_id, ti.task_id, checkpointing.run_name),
                  L.TRY_NUMBER: str(ti.try_number), L.ATTEMPT: str(number)}
    body = build_jobset(slices, checkpointing, dataclasses.replace(workload, jobset_name=name), labels, customization)
    return name, body


class MtcJobSetOperator(AttemptEndMixin, JobSetTargetMixin):
    """Run multi-slice training as a JobSet with the MTC ramdisk until it reaches `target_step`.

    :param slices: SliceSpec or dict (tpu_type, topology, num_slices, machine_type).
    :param checkpointing: CheckpointingSpec or dict (run_name, base_output_directory, steps, MaxText flags).
    :param workload: WorkloadSpec or dict (jobset_name, image, command, namespace, max_restarts, ...).
    :param deferrable: wait in the triggerer (default: Airflow's operators.default_deferrable).
    :param checkpoint_store_factory: (checkpoint_dir, gcp_conn_id) -> CheckpointStore; default open_store.
    :param customization: CustomizationSpec or dict: Kueue queue and priority, spot or reserved capacity, extra
        volumes, env from Secrets/ConfigMaps (references only), /dev/shm size, validated overrides
        (see core.definition.customization).
    :param retries: resubmissions allowed (each Airflow retry submits the next attempt).
    :param retry_delay: wait before the first resubmission.
    :param retry_exponential_backoff: multiply the wait by this factor after each attempt.
    :param max_retry_delay: the longest wait between attempts.

    :param int target_step: the step that means "done"; default `checkpointing.steps`.
    :param int crash_loop_attempts: fail for good after this many consecutive attempts without checkpoint progress
        (a stalled attempt counts like a failed one).
    :param float poll_interval: seconds between polls when the watch cannot be used, and between stall checks.
    :param float stall_timeout: seconds without progress (any source: the workload's reported steps, MTC replicator
        backups, finalized checkpoints; core.measure.progress.ProgressSignal; measured while the JobSet runs, on successful
        listings only) before the attempt counts as stalled: it is deleted and resubmitted. "derived": from the run's
        cadence (core.measure.cadence), re-derived from the step time the run reports. An explicit value shorter than the
        gap of every signal it is measured against is refused (core.measure.cadence.check_stall_timeout).
    :param dict stall_cadence: the plan's cadence (core.definition.run.stall_rule) when its stall_timeout was derived: the trigger
        re-derives the limit from it (templated); None: stall_timeout as given (or derived here, see above).
    :param float startup_timeout: seconds each start of the pods (the first, and each in-cluster restart) may take until
        every pod runs before the run fails; None: wait for ever, logging "waiting for capacity" every
        `capacity_log_interval` seconds.
    :param float image_pull_timeout: seconds a start of the pods may keep failing to pull its image or create its
        container (ErrImagePull, ImagePullBackOff, CreateContainerError: Kubernetes retries these with back-off)
        before the run fails with the pod's message (templated; default 900: a replacement node pulling a large
        image). What cannot heal (InvalidImageName, a missing Secret or ConfigMap) fails at once. None: no bound.
    :param float capacity_log_interval: seconds between "waiting for capacity: k of n pods scheduled" lines.
    :param float first_step_floor: the least time a start of the pods may take from running to its first reported step
        before it counts as stalled (templated; default 1800: a large slice's restore and compilation). Once the
        workload has reported steps in this attempt, each later start gets 3 x the longest time to first step
        measured so far, never less than this (core.measure.cadence.first_step_limit).
    :param float listing_timeout: seconds the checkpoint listing may keep failing (403, 429, 503, timeouts) before the
        try fails with the bucket and the HTTP status; training is not touched meanwhile.
    :param float progress_interval: seconds between progress lines in the task log while the run trains ("step N of T,
        S steps/h, ETA, newest checkpoint, restarts so far; where the step comes from"), whether or not stall
        detection is on. The step is the workload's own (the leader pod's `completed step` lines when `pod_logs` is
        on, or the local workload's events), else the newest finalized checkpoint. Each report is pushed to XCom
        key `progress` during the run (from the triggerer) and again when the watch ends. None or 0: no lines.
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
    :param int keep_failed_attempts: how many of the newest failed attempts' JobSets stay in the cluster, for
        debugging, when the next attempt is submitted (templated; default 0: an ended attempt is deleted before the
        next one). Each attempt has its own name (`<jobset_name>-<run hash>-a<attempt>`), so a kept one never blocks the
        next; older failed ones beyond the bound are deleted. A kept JobSet has no running pods (they ended with
        it) and keeps its pods' logs; the teardown deletes it unless its own keep_failed_attempts says otherwise,
        and `mtc delete RUN --attempt N` deletes it by hand. Every delete and every kept JobSet is logged with who
        asked.

    The settings (from target_step on) are parsed once per try into one options object
    (core.attempt.launch_options.LaunchOptions), from which the trigger's settings come.

    Where it runs: target, kubernetes_conn_id and the google provider's parameters (gcp_conn_id,
    impersonation_chain, project_id, location, cluster_name, use_dns_endpoint), as JobSetTargetMixin takes them;
    the Google connection and impersonation also serve every GCS read.
    """

    template_fields: Sequence[str] = (
        "slices", "checkpointing", "workload", *JOBSET_TARGET_FIELDS, "target_step",
        "fault_plan", "stall_timeout", "startup_timeout", "poll_interval", "customization", "progress_interval",
        "image_pull_timeout", "api_outage_timeout", "wait_for", "crash_loop_attempts", "listing_timeout",
        "deletion_timeout", "capacity_log_interval", "keep_failed_attempts", "pod_logs", "pod_logs_interval",
        "pod_logs_max_lines", "pod_logs_max_bytes", "stall_cadence", "first_step_floor",
    )
    template_fields_renderers = {"slices": "json", "checkpointing": "json", "workload": "json"}
    operator_extra_links = JOBSET_LINKS
    shallow_copy_attrs: Sequence[str] = ("hook", "_journal")  # clients hold locks: a copied task shares them
    ui_color = "#d9ead3"

    def __init__(
        self,
        *,
        slices: SliceSpec | Mapping[str, Any],
        checkpointing: CheckpointingSpec | Mapping[str, Any],
        workload: WorkloadSpec | Mapping[str, Any],
        customization: CustomizationSpec | Mapping[str, Any] | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        checkpoint_store_factory: Callable[[str, str], CheckpointStore] | None = None,
        retries: int = 6,
        retry_delay: timedelta = timedelta(seconds=30),
        retry_exponential_backoff: float = 2.0,
        max_retry_delay: timedelta = timedelta(minutes=30),
        **kwargs: Any,
    ) -> None:
        # The settings (core.attempt.launch_options.OPTION_DEFAULTS: target_step, stall_timeout, ...) are keyword arguments
        # too, kept as given (templates render them) and parsed once per try into self._options.
        settings = {name: kwargs.pop(name, default) for name, default in OPTION_DEFAULTS.items()}
        if ResubmissionPolicy is not None and kwargs.get("retry_policy") is None:
            kwargs["retry_policy"] = ResubmissionPolicy()  # an expected resubmission's retry carries its reason
        super().__init__(retries=retries, retry_delay=retry_delay, retry_exponential_backoff=retry_exponential_backoff,
                         max_retry_delay=max_retry_delay, **kwargs)
        self.slices = slices
        self.checkpointing = checkpointing
        self.workload = workload
        self.customization = customization
        self.deferrable = deferrable
        self.checkpoint_store_factory = checkpoint_store_factory
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
        """The run description's sections this operator launches, validated once per try (the plan's sections as
        much as a DAG author's: one path; it costs 0.06-0.33 ms, measured when a digest-and-trust path was removed),
        and checked across sections as `mtc plan` checks them. Raises SpecError naming the field."""
        if self._described is not None:
            return self._described
        from mtc_provider.core.definition.run_checks import check_run  # imported where it runs: DAG files stay light
        from mtc_provider.core.definition.spec import CheckpointingSpec, WorkloadSpec

        kinds = (SliceSpec, CheckpointingSpec, WorkloadSpec, CustomizationSpec)
        given = (self.slices, self.checkpointing, self.workload, self.customization)
        slices, checkpointing, workload, customization = (
            _spec(k, name, value) for k, name, value in zip(kinds, ("slices", "checkpointing", "workload",
                                                                    "customization"), given))
        # The run description's cross-section checks (as `mtc plan` makes them): GKE's Multislice rule, and the
        # names JobSet's webhook derives from the attempt names this operator submits.
        check_run(target_kind or self._target().kind, slices, workload=workload, customization=customization)
        self._described = (slices, checkpointing, workload, customization)
        return self._described

    def _specs(self, ti: Any | None = None) -> tuple[SliceSpec, CheckpointingSpec, WorkloadSpec, int]:
        """This try's sections and settings, validated once, and its JobSet rendered once: what the manifest builder
        refuses fails here, before any call (AirflowFailException naming the field)."""
        self._described = self._options = None  # this try's arguments, as rendered for it
        try:
            slices, checkpointing, workload, customization = self._describe(self._target().kind)
            options = self._parse_options(say_warnings=True)
            self._rendered = _attempt_body(slices, checkpointing, workload, customization, ti)
        except (SpecError, ValueError) as exc:
            raise AirflowFailException(f"invalid spec: {exc}") from exc
        return slices, checkpointing, workload, options.target_step

    def _parse_options(self, say_warnings: bool = False) -> LaunchOptions:
        """The settings from the rendered fields, once per try (core.attempt.launch_options); SpecError names the field.
        Their warnings are said where the try starts (`_specs`), not again when it resumes."""
        if self._options is None:
            target = self._target()
            _, checkpointing, workload, _ = self._describe(target.kind)
            self._options, warnings = LaunchOptions.parse(
                {name: getattr(self, name) for name in OPTION_DEFAULTS}, default_target_step=checkpointing.steps,
                kind=target.kind, checkpointing=checkpointing, workload=workload,
                injects_faults=backend_for(target).injects_faults)
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
        """The newest finalized step; None in completion mode, which never reads a checkpoint store. A listing that
        keeps failing is waited out for listing_timeout, as the trigger does: a storage outage at an attempt's end
        or at the resubmission must not spend an Airflow retry (the soak's listing outage did)."""
        if store is None:
            return None
        from mtc_provider.adapters.checkpoint_stores import restorable_step
        from mtc_provider.adapters.retry import through_listing_outage
        from mtc_provider.core.measure.progress import replicator_backup_dir

        # The restorable step (docs/resubmission.md, "Progress"): in multi-tier mode a replicator backup counts,
        # as in the triggerer's end of an attempt (triggers.jobset._latest_checkpoint).
        try:
            slices, checkpointing = self._describe()[:2]
            backup_dir, nodes = replicator_backup_dir(checkpointing), slices.num_slices * slices.hosts_per_slice
        except (SpecError, ValueError):  # the sections were already checked where it matters (execute)
            backup_dir, nodes = None, None
        return through_listing_outage(lambda: restorable_step(store, checkpoint_dir, backup_dir, nodes),
                                      checkpoint_dir,
                                      self._opts.times.listing_timeout, self.log)

    def _latest_or_none(self, store: CheckpointStore | None, checkpoint_dir: str) -> int | None:
        """The newest step for a report line; a listing outage must not hide the attempt's own outcome."""
        try:
            return self._latest(store, checkpoint_dir)
        except Exception as exc:  # noqa: BLE001 - reported, then decided without the step
            self.log.warning("listing %s failed (%s): newest finalized step unknown", checkpoint_dir, exc)
            return None

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
        """The JobSet client of this try (hooks.jobset): every request waits out an unreachable API for
        api_outage_timeout (then ApiUnreachable). Made on first use, after the fields are rendered."""
        from mtc_provider.hooks.jobset import MtcJobSetHook

        hook = MtcJobSetHook(connection=self._connection(), api_outage_timeout=self._opts.times.api_outage_timeout)
        hook._log = self.log  # its lines (waiting for a deletion, a reattach) are this task's, as before the move
        return hook

    def _unreachable(self, exc: ApiUnreachable) -> ApiUnreachableFailure:
        """An outage is not an attempt: fail for good (no retry spent), the JobSet and the run lock untouched."""
        return ApiUnreachableFailure(f"{exc}: {NOT_AN_ATTEMPT}")

    def _keep_for_teardown(self, context: Any, fault: OrchestratorFault) -> None:
        """Tell the teardown that this try ended for the orchestrator's trouble, so the JobSet is not the run's end."""
        ti = context.get("ti") if isinstance(context, Mapping) else None
        if ti is None:
            return
        try:
            ti.xcom_push(key=JOBSET_KEPT_XCOM_KEY, value={"reason": str(fault)})
        except Exception as exc:  # noqa: BLE001 - the failure itself must still reach Airflow
            self.log.warning("could not record for the teardown that the JobSet is kept (%s)", exc)

    # --- execute ------------------------------------------------------------------------------------
    def execute(self, context: Any) -> Any:
        # An attempt interrupted after progress is followed in this same try (NextAttemptInTry): a loop, not a
        # recursion, so a synchronous try survives any number of them.
        outer, self._in_execute = getattr(self, "_in_execute", False), True
        try:
            while True:
                try:
                    return self._execute_once(context)
                except NextAttemptInTry:
                    if outer:  # an execute further out loops (execute_complete -> execute -> ...)
                        raise
        finally:
            self._in_execute = outer

    def _execute_once(self, context: Any) -> Any:
        try:
            try:
                return self._execute(context)
            except ApiUnreachable as exc:  # the run lock is kept: releasing it would need the API
                raise self._unreachable(exc) from exc
            except Exception as exc:
                fault = self._fault_on_last_try(context.get("ti") if isinstance(context, Mapping) else None, exc)
                if fault is exc:
                    raise
                raise fault from exc
        except OrchestratorFault as fault:
            self._keep_for_teardown(context, fault)
            raise

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
            latest = self._latest(store, checkpoint_dir) if needs_latest_step(found) else None
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
        own = _open_attempt_of_try(found, lock_data[ATTEMPTS], ti.try_number)
        if plan.kind not in (REATTACH, TAKE_RESULT) and own is not None and evaluate_jobset(own).ended:
            # This try's own attempt ended while the try was not watching it (the try watches it again after an
            # event that was not its own, or a failed trigger): that end decides the try, as its trigger's event
            # would have; it is never deleted and resubmitted under its own name.
            state = evaluate_jobset(own)
            self.log.info("JobSet %s of this try already ended (%s): its end decides this try", state.name,
                          state.phase)
            own_history = list(lock_data[HISTORY]) or history_of(own)
            return self._recorded(context, namespace, checkpoint_dir, target_step, None, lambda: self._finish(
                context, connection, lock, state, attempt_of(own), own_history, store, checkpoint_dir, target_step,
                state.restarts))
        history = list(plan.history)
        previous_step = plan.start_step
        if plan.kind == REATTACH:
            obj = by_name[plan.name]
            self.log.info("reattaching to JobSet %s/%s (attempt %s), not creating another",
                          namespace, plan.name, plan.attempt)
        elif plan.kind == TAKE_RESULT:
            obj = by_name[plan.name]
            state = evaluate_jobset(obj)
            self.log.info("JobSet %s already ended (%s) with training done: taking its result", state.name, state.phase)
            return self._recorded(context, namespace, checkpoint_dir, target_step, None, lambda: self._finish(
                context, connection, lock, state, plan.attempt, history, store, checkpoint_dir, target_step,
                state.restarts))
        else:
            number = next_attempt(found, lock_data[ATTEMPTS], ti.try_number)
            if number != ti.try_number:  # named by its attempt number: one try submits several after progress
                self._rendered = _attempt_body(slices, checkpointing, workload, self._described[3], ti, number)
            kept = kept_failed([by_name[name] for name in plan.to_delete], self._opts.keep_failed_attempts)
            asked = f"{describe_owner(_owner(ti))}, before attempt {number}"
            for name in plan.to_delete:  # ended attempts: free the slices; checkpoints stay in the bucket
                phase = evaluate_jobset(by_name[name]).phase
                if name in kept:
                    self.log.warning("keeping failed JobSet %s/%s for debugging (keep_failed_attempts=%s, asked by "
                                     "%s): its pods' logs stay readable (mtc logs %s --attempt %s); the teardown "
                                     "deletes it, or: mtc delete %s --attempt %s", namespace, name,
                                     self._opts.keep_failed_attempts, asked, checkpointing.run_name,
                                     attempt_of(by_name[name]), checkpointing.run_name, attempt_of(by_name[name]))
                    continue
                self.log.info("deleting ended JobSet %s/%s (%s) before the next attempt (checkpoints are kept): "
                              "asked by %s", namespace, name, phase, asked)
                self.hook.delete(name, namespace, reason=V.DELETE_ATTEMPT_ENDED)
            obj = self._submit(workload, run_labels, ti, history)
            record = AttemptRecord(attempt=number, try_number=ti.try_number, jobset=obj["metadata"]["name"],
                                   start=time.time(), last_step=previous_step)
            journal = self._journal_for(context, lock, namespace, checkpoint_dir, target_step)
            self._write_record(ti, namespace, checkpoint_dir, target_step, RUNNING, journal.open(record, history),
                               "attempt submitted")
            metrics.attempt_submitted(metrics.tags(ti.dag_id, ti.task_id, checkpointing.run_name,
                                                   connection.get("kind")), lock_data[ATTEMPTS], record.start)
        name = obj["metadata"]["name"]
        self._current = (connection, namespace, name, {**_owner(ti), "run_name": checkpointing.run_name})
        persist_links(context, self._target(), namespace, name, checkpoint_dir, start=created_at(obj, time.time()),
                      replicated_job=workload.replicated_job_name)
        self._push_run(context, lock, checkpoint_dir, target_step, checkpointing.run_name)
        state = evaluate_jobset(obj)
        gcp_conn_id, impersonation_chain = self._google()
        from mtc_provider.core.measure.progress import replicator_backup_dir
        from mtc_provider.triggers.jobset import JobSetTrigger

        trigger = JobSetTrigger(
            connection=connection, namespace=namespace, name=name,
            resource_version=obj["metadata"].get("resourceVersion"), restarts_seen=state.restarts,
            # The checkpoint directory is listed for stall detection and for the progress line.
            checkpoint_dir=None if self._completion else checkpoint_dir, gcp_conn_id=gcp_conn_id,
            impersonation_chain=impersonation_chain, watch=self._opts.watch(),
            # (multi-tier) the replicator's backups as progress
            backup_dir=None if self._completion else replicator_backup_dir(checkpointing),
            backup_nodes=slices.num_slices * slices.hosts_per_slice,
            # Echoed back in the event: the attempt's bookkeeping survives the deferral.
            extra={"attempt": attempt_of(obj), "history": history, "target_step": target_step,
                   "checkpoint_dir": checkpoint_dir, "run_name": checkpointing.run_name, "namespace": namespace,
                   # a plain retry may end in the triggerer (triggers.attempt_end); never the last try
                   "end_retry_in_trigger": bool(self.deferrable) and not self._last_try(ti),
                   "crash_loop_attempts": self._opts.crash_loop_attempts, "completion": self._completion,
                   # the try that deferred: an event Airflow resumes another try with is not that try's end
                   "owner": _owner(ti), "max_tries": self._max_tries(ti),
                   # the attempt journal the triggerer's end of a retry writes through, as the worker's does
                   "journal": self._journal_for(context, lock, namespace, checkpoint_dir, target_step).settings()},
        )
        if self.deferrable:
            self.defer(trigger=trigger, method_name="execute_complete")
        # Synchronous path: the same trigger, run to its first event in this worker.
        return self.execute_complete(context, asyncio.run(_first_event(trigger)))

    def _submit(self, workload, run_labels, ti, history) -> dict[str, Any]:
        name, body = self._rendered[0], copy.deepcopy(self._rendered[1])  # rendered once, by _specs for this try
        body["metadata"].setdefault("annotations", {})[STEP_HISTORY_ANNOTATION] = json.dumps(history)
        if self._opts.fault_plan:
            from mtc_provider.core.basics.vocabulary import FAULT_PLAN_ANNOTATION

            body["metadata"]["annotations"][FAULT_PLAN_ANNOTATION] = json.dumps(self._opts.fault_plan)
        try:
            obj, created = self.hook.submit_attempt(workload.namespace, name, body, run_labels)
        except ApiUnreachable:
            raise  # an outage, not a rejection: execute() says so
        except ApiError as exc:
            if isinstance(exc, Forbidden) and exc.rbac:
                raise  # RBAC, not the spec: execute fails the try without releasing anything
            decision = decide_rejected(exc.status, str(exc))
            if decision.kind == FAIL:
                raise AirflowFailException(decision.reason) from exc
            raise JobSetAttemptFailed(decision.reason) from exc
        if created:
            self.log.info("submitted JobSet %s/%s (attempt %s, try %s, newest finalized step %s)",
                          workload.namespace, name, attempt_of(body), ti.try_number, history[-1])
        return obj

    def _lock_for(self, context, extra: Mapping[str, Any]) -> RunLock:
        ti = context["ti"]
        run_name = extra.get("run_name") or self._describe()[1].run_name
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
        """SIGTERM of a synchronous try: stop the JobSet only when Airflow confirms a user's action.

        A worker's own SIGTERM (a deploy, a scale-down) also lands here while the task is still `running` on the
        server, and a user's clear of a running try leaves it `restarting`: both keep the JobSet training and the
        next try reattaches to it. A mark (failed, success) or a deleted DAG run (no task instance row any more)
        deletes it, and releases the run lock, since no try of that run will ever come back for them
        (core.attempt.ownership.kill_verdict).
        """
        if not self._current:
            return
        connection, namespace, name, ids = self._current
        lookup, error = self._task_lookup()
        verdict = kill_verdict(lookup, describe_owner(ids), error)
        if not verdict.delete:
            self.log.warning("worker stopping: JobSet %s/%s kept: %s; the next try reattaches (to stop the run "
                             "yourself: kubectl delete jobset -n %s %s)", namespace, name, verdict.reason,
                             namespace, name)
            return
        self.log.warning("deleting JobSet %s/%s (checkpoints are kept): %s", namespace, name, verdict.reason)
        self._stopped_by_user = True  # whatever the try raises next, the run was ended by a confirmed user action
        api = targets.jobset_api(connection)
        try:  # Airflow SIGKILLs this process 5 s after its SIGTERM: no time to wait an outage out here
            api.delete(namespace, name, reason=V.DELETE_USER_KILL)
        except (Retryable, ApiUnreachable) as exc:
            from mtc_provider.adapters.kill_delete import handoff

            self.log.warning("%s", handoff(f"{namespace}/{name}", describe_failure(exc), namespace, name))
            return
        RunLock(lock_api(connection, api), namespace, ids["run_name"],
                L.run_labels(ids["dag_id"], ids["run_id"], ids["task_id"], ids["run_name"])).release()


def _open_attempt_of_try(jobsets: Sequence[Mapping[str, Any]], records: Sequence[Mapping[str, Any]],
                         try_number: int) -> dict[str, Any] | None:
    """This try's newest attempt while its end is not yet decided (its record in the run lock still open, or no
    record at all): an ended one decides the try. An attempt this try already closed and followed (interrupted
    after progress) is not: the try submits the next one."""
    mine = [j for j in jobsets if str((j["metadata"].get("labels") or {}).get(L.TRY_NUMBER)) == str(try_number)]
    if not mine:
        return None
    newest = max(mine, key=attempt_of)
    record = next((r for r in records if r.get("jobset") == newest["metadata"]["name"]), None)
    return newest if record is None or record.get("end") is None else None


async def _first_event(trigger: JobSetTrigger) -> dict[str, Any]:
    async for event in trigger.run():
        return event.payload
    return JobSetEvent(ERROR, trigger.namespace, trigger.name, message="the watch ended without an event").to_payload()
