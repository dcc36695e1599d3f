"""Launch a training JobSet, follow it, and let Airflow's retries resubmit it until training reaches its target.

One try of the task is one attempt. A try first looks for its run's JobSets by label (dag, run, task,
run name): a live one is reattached to (a worker that died, or a triggerer restart, never leads to a
second JobSet); an ended one is deleted (its checkpoints stay) and the next attempt is submitted with
the same run_name, so it resumes from the newest checkpoint. When the attempt ends, the newest
finalized checkpoint step decides (core.resubmission): succeed, retry (a retryable exception, so
Airflow's retries resubmit) or fail for good (AirflowFailException with the reason).

Attempt JobSets are named `<jobset_name>-<run hash>-a<attempt>`, and the run hash keeps two DAG runs apart.
A deleted JobSet stays (terminating) until its pods are gone: it is never reattached to; the next try
waits, bounded and logged, for it to go (its pods may still write checkpoints), then submits.

One lock object per run name (adapters.run_lock; a ConfigMap on GKE), created with create-if-absent
semantics, makes "no other writer" atomic: of two launches started together exactly one proceeds. It also
keeps what an attempt's deletion must not lose: the step history (newest finalized step when each attempt
started, for the crash-loop guard) and one record per attempt (start, end, outcome, restarts, newest step),
pushed as the `attempts` XCom for the goodput report. It is released when the run ends for good.
What to do in a try is decided by pure functions (core.launch.plan_launch, core.resubmission.decide, decide_stalled).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import json
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from mtc_provider import targets
from mtc_provider.adapters import metrics
from mtc_provider.adapters.retry import ApiUnreachable, PermissionDenied, Retryable, describe_failure
from mtc_provider.adapters.pod_logs import log_failed_pod_tails
from mtc_provider.adapters.kubernetes import Forbidden
from mtc_provider.adapters.protocols import AlreadyExists, ApiError, CheckpointStore, NotFound
from mtc_provider.adapters.run_lock import ATTEMPTS, HISTORY, LockHeld, RunLock, lock_api
from mtc_provider.core.outcomes import DISRUPTED, FAILED_OUTCOME, FINISHED
from mtc_provider.targets import backend_for
from mtc_provider.core import labels as L
from mtc_provider.core import vocabulary as V
from mtc_provider.core.customization import CustomizationSpec
from mtc_provider.core.errors import SpecError
from mtc_provider.core.ownership import describe_owner, foreign_event, kill_verdict, owner_gone
from mtc_provider.core.ownership import task_owner as _owner
from mtc_provider.core.resubmission import (
    DEFAULT_CRASH_LOOP_ATTEMPTS,
    FAIL,
    REATTACH,
    SUCCEED,
    TAKE_RESULT,
    WAIT_DELETION,
    decide,
    decide_on_completion,
    decide_rejected,
    decide_stalled,
    in_try_line,
    resubmission_line,
    resubmit_in_try,
)
from mtc_provider.core.interruptions import interruption_of
from mtc_provider.core.jobset_names import attempt_name
from mtc_provider.core.launch import attempt_of, history_of, needs_latest_step, next_attempt, plan_launch
from mtc_provider.core.run_summary import FAILED as FAILED_RUN, RETRYING, RUNNING, SUCCEEDED as SUCCEEDED_RUN
from mtc_provider.core.status import SUCCEEDED, JobSetState, evaluate_jobset
from mtc_provider.core.tpu import SliceSpec
from mtc_provider.links.jobset import JOBSET_LINKS, created_at, persist_links, persist_logs_link
from mtc_provider.operators.base import JOBSET_TARGET_FIELDS, JobSetTargetMixin
from mtc_provider.core import outage as outages
from mtc_provider.core.jobset_events import (
    API_UNREACHABLE,
    DELETED,
    ENDED,
    ERROR,
    FORBIDDEN,
    LISTING_FAILED,
    STALLED,
    STARTUP_TIMEOUT,
    UNSTARTABLE,
    JobSetEvent,
)

if TYPE_CHECKING:  # the spec and the trigger are imported where they run: DAG files stay light
    from mtc_provider.core.spec import CheckpointingSpec, WorkloadSpec
    from mtc_provider.triggers.jobset import JobSetTrigger

try:
    from airflow.sdk.configuration import conf
except ImportError:  # pragma: no cover - older Airflow
    from airflow.configuration import conf

STEP_HISTORY_ANNOTATION = f"{L.PREFIX}/step-history"
XCOM_KEY = "jobset"
ATTEMPTS_XCOM_KEY = "attempts"
WATCH_FAILURES_XCOM_KEY = "mtc_watch_failures"  # failed triggers of this try (resume_execution's bound)
MAX_WATCH_FAILURES = 3
RUN_XCOM_KEY = "mtc_run"  # checkpoint_dir, target_step, run_name: pushed at each try's launch, for the run view
PROGRESS_XCOM_KEY = "progress"  # the latest progress figures of the watch (core.progress_report)
WAIT_FOR_CHECKPOINT = "checkpoint"
WAIT_FOR_COMPLETION = "completion"
WAIT_FOR = (WAIT_FOR_CHECKPOINT, WAIT_FOR_COMPLETION)
NOT_AN_ATTEMPT = ("a Kubernetes API outage, not a failure of the training attempt: no Airflow retry is spent on it, "
                  "and the JobSet was not touched (it keeps training). Once the API answers again, clear this task: "
                  "the next try reattaches to the JobSet")


class JobSetAttemptFailed(AirflowException):
    """This attempt ended without reaching the target step, for a retryable reason: Airflow retries resubmit."""


class NextAttemptInTry(Exception):
    """This attempt was interrupted after it made progress (core.resubmission.resubmit_in_try): its record is
    closed, and the same try submits the next attempt (`execute` again) instead of spending an Airflow retry.
    Never reaches Airflow: `execute` and `execute_complete` catch it."""


try:  # Airflow 3.3's pluggable retry policies (airflow.sdk.definitions.retry_policy)
    from airflow.sdk.definitions.retry_policy import RetryDecision, RetryPolicy
except ImportError:  # pragma: no cover - an Airflow without retry policies: the default retry logic applies
    RetryPolicy = None


if RetryPolicy is not None:
    class ResubmissionPolicy(RetryPolicy):
        """An expected resubmission is a retry with its reason: Airflow logs `Retry policy decision` with it (INFO)
        and keeps it on the task instance (`retry_reason`). Anything else: Airflow's own retry logic.

        Airflow 3.3's task runner still logs every exception that ends a try as `Task failed with exception` (ERROR,
        with the traceback: task_runner.run, before the policy is asked); no quieter path ends a try for a retry
        (a reschedule keeps the try number, which names the attempt's JobSet). So the operator logs the one clear
        line first, and raises without a chained cause. Evaluated in the worker only; never serialized (the DAG
        keeps `has_retry_policy`).
        """

        def evaluate(self, exception, try_number, max_tries, context=None):
            if isinstance(exception, JobSetAttemptFailed):
                return RetryDecision.retry(reason=str(exception)[:500])
            return RetryDecision.default()
else:  # pragma: no cover
    ResubmissionPolicy = None


JOBSET_KEPT_XCOM_KEY = "jobset_kept"  # set by a try that ended for the orchestrator's own trouble; read by the teardown


class OrchestratorFault(AirflowFailException):
    """The try ended for the orchestrator's own trouble (an unreachable API, a missing permission), not the run's: the
    JobSet may be training, so it and the run lock are left as they are, and the teardown keeps them too
    (JOBSET_KEPT_XCOM_KEY). No retry is spent; clearing the task reattaches."""


class ApiUnreachableFailure(OrchestratorFault):
    """The Kubernetes API stayed unreachable for api_outage_timeout."""


class JobSetForbidden(OrchestratorFault):
    """A 403 from the cluster: no retry grants a permission, so the try fails for good at once. Nothing is deleted
    and the run lock is kept (a JobSet may be training): grant the permission, then clear the task to reattach."""


LEFT_AS_IS = ("nothing was deleted for it and the run lock is kept; once the permission is granted "
              "(docs/deployment.md, RBAC), clear this task: it reattaches to a live JobSet")


def _forbidden(message: str) -> JobSetForbidden:
    return JobSetForbidden(f"{message}; {LEFT_AS_IS}")


class StorageForbidden(OrchestratorFault):
    """A 403 from the checkpoint storage for Airflow's own identity (listing the run's checkpoints): handled like
    the cluster's 403. The JobSet, which writes with its own identity, may be training: nothing is deleted, the run
    lock is kept, and the message says which identity lacks which permission on which bucket."""


def storage_forbidden(exc: BaseException, checkpoint_dir: str, gcp_conn_id: str, impersonation_chain: Any) -> \
        StorageForbidden:
    from mtc_provider.core.spec import bucket_of

    bucket = f"bucket {bucket_of(checkpoint_dir)}" if checkpoint_dir.startswith("gs://") else checkpoint_dir
    who = f"the Airflow connection {gcp_conn_id!r}" + (f" impersonating {impersonation_chain!r}"
                                                      if impersonation_chain else "")
    permission = getattr(exc, "permission", "") or "storage.objects.list (roles/storage.objectViewer)"
    return StorageForbidden(f"{who} may not read the run's checkpoints in {bucket}: missing {permission} "
                            f"({exc}); {LEFT_AS_IS.replace('(docs/deployment.md, RBAC)', '(docs/deployment.md)')}")


def _spec(kind: type, section: str, value: Any) -> Any:
    """A spec object or a plain dict (DAG params), through the run description's one dict-to-spec function."""
    from mtc_provider.core.spec import spec_from_dict

    return spec_from_dict(kind, section, value)


def _attempt_body(slices: SliceSpec, checkpointing: CheckpointingSpec, workload: WorkloadSpec,
                  customization: CustomizationSpec, ti: Any | None, attempt: int | None = None
                  ) -> tuple[str, dict[str, Any]]:
    """The try's JobSet, rendered once per try (before any side effect, so a refusal costs nothing) and again with
    the attempt's own number when it is submitted (one try may submit several attempts): its attempt name and
    labels come from the task instance; without one (a bare validation) the run's own name."""
    from mtc_provider.core.jobset import build_jobset

    if ti is None:
        name, labels = workload.jobset_name, None
    else:
        number = attempt or ti.try_number
        name = attempt_name(workload.jobset_name, ti.dag_id, ti.run_id, ti.task_id, number)
        labels = {**L.run_labels(ti.dag_id, ti.run_id, ti.task_id, checkpointing.run_name),
                  L.TRY_NUMBER: str(ti.try_number), L.ATTEMPT: str(number)}
    body = build_jobset(slices, checkpointing, dataclasses.replace(workload, jobset_name=name), labels, customization)
    return name, body


class MtcJobSetOperator(JobSetTargetMixin):
    """Run multi-slice training as a JobSet with the MTC ramdisk until it reaches `target_step`.

    :param slices: SliceSpec or dict (tpu_type, topology, num_slices, machine_type).
    :param checkpointing: CheckpointingSpec or dict (run_name, base_output_directory, steps, MaxText flags).
    :param workload: WorkloadSpec or dict (jobset_name, image, command, namespace, max_restarts, ...).
    :param target_step: the step that means "done"; default `checkpointing.steps`.
    :param crash_loop_attempts: fail for good after this many consecutive attempts without checkpoint progress
        (a stalled attempt counts like a failed one).
    :param poll_interval: seconds between polls when the watch cannot be used, and between stall checks.
    :param stall_timeout: seconds without progress (any source: the workload's reported steps, MTC replicator
        backups, finalized checkpoints; core.progress.ProgressSignal; measured while the JobSet runs, on successful
        listings only) before the attempt counts as stalled: it is deleted and resubmitted. "derived": from the run's
        cadence (core.cadence), re-derived from the step time the run reports. An explicit value shorter than the
        gap of every signal it is measured against is refused (core.cadence.check_stall_timeout).
    :param stall_cadence: the plan's cadence (core.run.stall_rule) when its stall_timeout was derived: the trigger
        re-derives the limit from it (templated); None: stall_timeout as given (or derived here, see above).
    :param startup_timeout: seconds each start of the pods (the first, and each in-cluster restart) may take until
        every pod runs before the run fails; None: wait for ever, logging "waiting for capacity" every
        `capacity_log_interval` seconds.
    :param image_pull_timeout: seconds a start of the pods may keep failing to pull its image or create its
        container (ErrImagePull, ImagePullBackOff, CreateContainerError: Kubernetes retries these with back-off)
        before the run fails with the pod's message (templated; default 900: a replacement node pulling a large
        image). What cannot heal (InvalidImageName, a missing Secret or ConfigMap) fails at once. None: no bound.
    :param capacity_log_interval: seconds between "waiting for capacity: k of n pods scheduled" lines.
    :param listing_timeout: seconds the checkpoint listing may keep failing (403, 429, 503, timeouts) before the
        try fails with the bucket and the HTTP status; training is not touched meanwhile.
    :param progress_interval: seconds between progress lines in the task log while the run trains ("step N of T,
        S steps/h, ETA, newest checkpoint, restarts so far; where the step comes from"), whether or not stall
        detection is on. The step is the workload's own (the leader pod's `completed step` lines when `pod_logs` is
        on, or the local workload's events), else the newest finalized checkpoint. Each report is pushed to XCom
        key `progress` during the run (from the triggerer) and again when the watch ends. None or 0: no lines.
    :param pod_logs: stream the leader pod's log into the task's log while the trigger waits (templated; default
        on). Bounded: at most `pod_logs_max_lines` lines and `pod_logs_max_bytes` bytes every `pod_logs_interval`
        seconds (the newest; a line counts what was left out).
    :param pod_logs_interval: seconds between reads of the leader pod's log (templated; default 30).
    :param pod_logs_max_lines: lines per read at most (templated; default 100).
    :param pod_logs_max_bytes: bytes per read at most (templated; default 32768).
    :param deletion_timeout: seconds a try waits for a terminating JobSet of this task to go before submitting.
    :param api_outage_timeout: seconds of continuous Kubernetes API outage (429, 5xx, refused or hanging
        connections) that the watch and every request wait out, with backoff honouring Retry-After, before the task
        fails for good naming the API and its last answer. An outage is not an attempt: it spends no Airflow
        retry, and the JobSet is never deleted for it (clear the task to reattach). Default one hour.
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
    :param run_digest: the training DAG's plan task's `digest` (core.run.run_plan, templated): while `slices`,
        `checkpointing`, `workload` and `customization` are exactly the sections the plan validated for this
        target kind, they are taken as validated (core.spec.spec_restored), not checked again; anything else (no
        digest, or a section changed since) is validated here, before any call.
    :param keep_failed_attempts: how many of the newest failed attempts' JobSets stay in the cluster, for
        debugging, when the next attempt is submitted (templated; default 0: an ended attempt is deleted before the
        next one). Each attempt has its own name (`<jobset_name>-<run hash>-a<attempt>`), so a kept one never blocks the
        next; older failed ones beyond the bound are deleted. A kept JobSet has no running pods (they ended with
        it) and keeps its pods' logs; the teardown deletes it unless its own keep_failed_attempts says otherwise,
        and `mtc delete RUN --attempt N` deletes it by hand. Every delete and every kept JobSet is logged with who
        asked.
    :param retries: resubmissions allowed (each Airflow retry submits the next attempt).
    :param retry_delay: wait before the first resubmission.
    :param retry_exponential_backoff: multiply the wait by this factor after each attempt.
    :param max_retry_delay: the longest wait between attempts.

    Where it runs: target, kubernetes_conn_id and the google provider's parameters (gcp_conn_id,
    impersonation_chain, project_id, location, cluster_name, use_dns_endpoint), as JobSetTargetMixin takes them;
    the Google connection and impersonation also serve every GCS read.
    """

    template_fields: Sequence[str] = (
        "slices", "checkpointing", "workload", *JOBSET_TARGET_FIELDS, "target_step",
        "fault_plan", "stall_timeout", "startup_timeout", "poll_interval", "customization", "progress_interval",
        "image_pull_timeout", "api_outage_timeout", "wait_for", "crash_loop_attempts", "listing_timeout",
        "deletion_timeout", "capacity_log_interval", "keep_failed_attempts", "pod_logs", "pod_logs_interval",
        "pod_logs_max_lines", "pod_logs_max_bytes", "run_digest", "stall_cadence",
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
        target_step: int | None = None,
        crash_loop_attempts: int = DEFAULT_CRASH_LOOP_ATTEMPTS,
        poll_interval: float = V.DEFAULT_POLL_INTERVAL_S,
        stall_timeout: float | str | None = None,
        stall_cadence: Mapping[str, Any] | None = None,
        startup_timeout: float | None = None,
        image_pull_timeout: float | None = 900.0,
        capacity_log_interval: float = 300.0,
        listing_timeout: float = 1800.0,
        progress_interval: float | None = 300.0,
        pod_logs: bool | str = True,
        pod_logs_interval: float = 30.0,
        pod_logs_max_lines: int = 100,
        pod_logs_max_bytes: int = 32_768,
        deletion_timeout: float = 900.0,
        api_outage_timeout: float = outages.DEFAULT_TIMEOUT,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        checkpoint_store_factory: Callable[[str, str], CheckpointStore] | None = None,
        fault_plan: list[Mapping[str, Any]] | Mapping[str, Any] | None = None,
        wait_for: str = WAIT_FOR_CHECKPOINT,
        customization: CustomizationSpec | Mapping[str, Any] | None = None,
        keep_failed_attempts: int = 0,
        run_digest: str | None = None,
        retries: int = 6,
        retry_delay: timedelta = timedelta(seconds=30),
        retry_exponential_backoff: float = 2.0,
        max_retry_delay: timedelta = timedelta(minutes=30),
        **kwargs: Any,
    ) -> None:
        if ResubmissionPolicy is not None and kwargs.get("retry_policy") is None:
            kwargs["retry_policy"] = ResubmissionPolicy()  # an expected resubmission's retry carries its reason
        super().__init__(retries=retries, retry_delay=retry_delay, retry_exponential_backoff=retry_exponential_backoff,
                         max_retry_delay=max_retry_delay, **kwargs)
        self.slices = slices
        self.checkpointing = checkpointing
        self.workload = workload
        self.target_step = target_step
        self.crash_loop_attempts = crash_loop_attempts
        self.poll_interval = poll_interval
        self.stall_timeout = stall_timeout
        self.stall_cadence = stall_cadence
        self.startup_timeout = startup_timeout
        self.image_pull_timeout = image_pull_timeout
        self.capacity_log_interval = capacity_log_interval
        self.listing_timeout = listing_timeout
        self.progress_interval = progress_interval
        self.pod_logs = pod_logs
        self.pod_logs_interval = pod_logs_interval
        self.pod_logs_max_lines = pod_logs_max_lines
        self.pod_logs_max_bytes = pod_logs_max_bytes
        self.deletion_timeout = deletion_timeout
        self.api_outage_timeout = api_outage_timeout
        self.deferrable = deferrable
        self.checkpoint_store_factory = checkpoint_store_factory
        self.fault_plan = fault_plan
        self.wait_for = wait_for
        self.customization = customization
        self.keep_failed_attempts = keep_failed_attempts
        self.run_digest = run_digest
        self._described: tuple[Any, ...] | None = None  # the specs of the rendered arguments, once per try (_describe)
        self._attempts_seen: list[dict[str, Any]] = []  # the run lock's attempt records, last read (_push)
        # (connection, namespace, name, ti ids) for on_kill
        self._current: tuple[dict[str, Any], str, str, dict[str, Any]] | None = None

    # --- inputs -------------------------------------------------------------------------------------
    def _describe(self, target_kind: str | None = None) -> tuple[SliceSpec, CheckpointingSpec, WorkloadSpec,
                                                                  CustomizationSpec]:
        """The run description's sections this operator launches, once per try: restored as the plan validated them
        when they match its digest (`run_digest`), else validated here (and checked across sections as `mtc plan`
        checks them). Raises SpecError naming the field."""
        if self._described is not None:
            return self._described
        from mtc_provider.core.run import LAUNCH_SECTIONS, launch_digest  # imported where it runs: DAG files stay light
        from mtc_provider.core.run_checks import check_run
        from mtc_provider.core.spec import CheckpointingSpec, WorkloadSpec, spec_restored

        kinds = (SliceSpec, CheckpointingSpec, WorkloadSpec, CustomizationSpec)
        given = dict(zip(LAUNCH_SECTIONS, (self.slices, self.checkpointing, self.workload, self.customization)))
        kind = target_kind or self._target().kind
        if self.run_digest and self.run_digest == launch_digest(kind, given):
            self.log.info("slices, checkpointing, workload and customization as the plan validated them (digest %s): "
                          "taken as they are", str(self.run_digest)[:12])
            self._described = tuple(spec_restored(k, given[name]) for k, name in zip(kinds, LAUNCH_SECTIONS))
            return self._described
        if self.run_digest:
            self.log.info("run_digest given, but the sections differ from the ones the plan validated for target %s: "
                          "validating them here", kind)
        slices, checkpointing, workload, customization = (_spec(k, name, given[name])
                                                          for k, name in zip(kinds, LAUNCH_SECTIONS))
        # The run description's cross-section checks (as `mtc plan` makes them): GKE's Multislice rule, and the
        # names JobSet's webhook derives from the attempt names this operator submits.
        check_run(kind, slices, workload=workload)
        self._described = (slices, checkpointing, workload, customization)
        return self._described

    def _specs(self, ti: Any | None = None) -> tuple[SliceSpec, CheckpointingSpec, WorkloadSpec, int]:
        self._described = None  # this try's arguments, as rendered for it
        try:
            target = self._target()
            slices, checkpointing, workload, customization = self._describe(target.kind)
            target_step = checkpointing.steps if self.target_step in (None, "") else int(self.target_step)
            if target_step <= 0:
                raise SpecError("target_step", self.target_step, "a positive integer (default: checkpointing.steps)")
            if isinstance(self.crash_loop_attempts, str) and self.crash_loop_attempts.strip().isdigit():
                self.crash_loop_attempts = int(self.crash_loop_attempts)  # a rendered template is text
            if isinstance(self.crash_loop_attempts, bool) or not isinstance(self.crash_loop_attempts, int) \
                    or self.crash_loop_attempts < 1:
                raise SpecError("crash_loop_attempts", self.crash_loop_attempts, "an integer >= 1")
            if self.wait_for not in WAIT_FOR:
                raise SpecError("wait_for", self.wait_for, " or ".join(WAIT_FOR))
            if self.fault_plan and not backend_for(target).injects_faults:
                raise SpecError("fault_plan", self.fault_plan,
                                f"empty on the {target.kind} target (faults are injected on the local target)")
            self._check_pod_logs()
            self._stall_rule(target.kind, checkpointing, workload)
            for field in ("startup_timeout", "image_pull_timeout"):
                value = getattr(self, field)
                if value not in (None, "") and float(value) <= 0:
                    raise SpecError(field, value, "a positive number of seconds, or None")
            self.poll_interval = float(self.poll_interval)  # templated values arrive as text
            for field in ("poll_interval", "listing_timeout", "deletion_timeout", "capacity_log_interval"):
                if float(getattr(self, field)) < 0:
                    raise SpecError(field, getattr(self, field), "a number of seconds >= 0")
                setattr(self, field, float(getattr(self, field)))
            self.api_outage_timeout = outages.validate("api_outage_timeout", self.api_outage_timeout)
            self.keep_failed_attempts = keep_count("keep_failed_attempts", self.keep_failed_attempts)
            # The try's JobSet, rendered once: what the manifest builder refuses fails here, before any call.
            self._rendered = _attempt_body(slices, checkpointing, workload, customization, ti)
        except (SpecError, ValueError) as exc:
            raise AirflowFailException(f"invalid spec: {exc}") from exc
        return slices, checkpointing, workload, target_step

    def _stall_rule(self, kind: str, checkpointing: CheckpointingSpec, workload: WorkloadSpec) -> None:
        """stall_timeout by the one rule (core.cadence): "derived" is derived here; an explicit value is checked
        against the signals this operator's watch sees (the pod logs when on; the events locally)."""
        from mtc_provider.core.cadence import check_stall_timeout, run_cadence, step_seconds_of

        value = self.stall_timeout
        if value in (None, ""):
            return  # no stall detection
        cadence = run_cadence(checkpointing, kind, reported=bool(self.pod_logs) or kind == "local",
                              step_seconds=step_seconds_of(kind, None, workload.extra_flags))
        if value == "derived":
            self.stall_timeout, self.stall_cadence = cadence.stall_limit(), cadence.to_dict()
            return
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = -1.0
        if number <= 0:
            raise SpecError("stall_timeout", value, 'a positive number of seconds, "derived", or None')
        self.stall_timeout = number
        if self.stall_cadence:
            return  # the plan's derived limit (checked when planned; the trigger re-derives it)
        for warning in check_stall_timeout(value, cadence):  # errors name the value as given
            self.log.warning("%s", warning)

    def _check_pod_logs(self) -> None:
        """pod_logs and its bounds, as rendered templates may give them (text); errors name the field."""
        flag = self.pod_logs
        if isinstance(flag, str) and flag.strip().lower() in ("true", "false", "1", "0", "yes", "no", "on", "off"):
            flag = flag.strip().lower() in ("true", "1", "yes", "on")
        if not isinstance(flag, bool):
            raise SpecError("pod_logs", self.pod_logs, "true or false")
        self.pod_logs = flag
        for field, low, kind in (("pod_logs_interval", 1.0, float), ("pod_logs_max_lines", 1, int),
                                 ("pod_logs_max_bytes", 256, int)):
            value = getattr(self, field)
            try:
                number = kind(value) if not isinstance(value, bool) else None
            except (TypeError, ValueError):
                number = None
            if number is None or number < low or (kind is int and float(value) != number):
                raise SpecError(field, value, f"{'an integer' if kind is int else 'a number'} >= {low}")
            setattr(self, field, number)

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
        from mtc_provider.core.progress import replicator_backup_dir

        # The restorable step (docs/resubmission.md, "Progress"): in multi-tier mode a replicator backup counts,
        # as in the triggerer's end of an attempt (triggers.jobset._latest_checkpoint).
        try:
            backup_dir = replicator_backup_dir(self._describe()[1])
        except (SpecError, ValueError):  # the sections were already checked where it matters (execute)
            backup_dir = None
        return through_listing_outage(lambda: restorable_step(store, checkpoint_dir, backup_dir), checkpoint_dir,
                                      float(self.listing_timeout), self.log)

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

    def _jobset_api(self, connection: Mapping[str, Any]):
        """The sync api, waiting out an unreachable API for api_outage_timeout (then ApiUnreachable)."""
        return targets.jobset_api(connection, outage_timeout=float(self.api_outage_timeout))

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
        except OrchestratorFault as fault:
            self._keep_for_teardown(context, fault)
            raise

    def _execute(self, context: Any) -> Any:
        ti = context["ti"]
        slices, checkpointing, workload, target_step = self._specs(ti)
        run_labels = L.run_labels(ti.dag_id, ti.run_id, ti.task_id, checkpointing.run_name)
        namespace = workload.namespace
        connection = self._connection()
        api = self._jobset_api(connection)
        store = self._store(checkpointing.checkpoint_directory)  # None: completion mode
        lock = RunLock(lock_api(connection, api), namespace, checkpointing.run_name, run_labels, _owner(ti))
        try:
            lock_data = lock.acquire(owner_gone=self._owner_gone)
        except Forbidden as exc:
            raise _forbidden(str(exc)) from exc
        except LockHeld as exc:
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
            return self._run_try(context, ti, api, connection, store, lock, lock_data, slices, checkpointing,
                                 workload, target_step, run_labels)
        except (JobSetForbidden, StorageForbidden):
            raise  # never release (delete) anything on a 403
        except Forbidden as exc:
            raise _forbidden(str(exc)) from exc
        except PermissionDenied as exc:  # the storage's 403 for Airflow's identity (the cluster's is Forbidden)
            raise storage_forbidden(exc, checkpointing.checkpoint_directory, *self._google()) from exc
        except AirflowFailException:
            lock.release()  # refused or failed for good: the run name is free again
            raise

    def _run_try(self, context, ti, api, connection, store, lock, lock_data, slices, checkpointing, workload,
                 target_step, run_labels) -> Any:
        namespace, checkpoint_dir = workload.namespace, checkpointing.checkpoint_directory
        while True:
            found = self._this_tasks_jobsets(api, namespace, checkpointing.run_name, run_labels)
            latest = self._latest(store, checkpoint_dir) if needs_latest_step(found) else None
            plan = plan_launch(found, lock_data[HISTORY], latest, target_step, self._completion)
            if plan.kind != WAIT_DELETION:
                break
            self._wait_for_deletion(api, namespace, plan.waiting_for)

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
            kept = kept_failed([by_name[name] for name in plan.to_delete], self.keep_failed_attempts)
            asked = f"{describe_owner(_owner(ti))}, before attempt {number}"
            for name in plan.to_delete:  # ended attempts: free the slices; checkpoints stay in the bucket
                phase = evaluate_jobset(by_name[name]).phase
                if name in kept:
                    self.log.warning("keeping failed JobSet %s/%s for debugging (keep_failed_attempts=%s, asked by "
                                     "%s): its pods' logs stay readable (mtc logs %s --attempt %s); the teardown "
                                     "deletes it, or: mtc delete %s --attempt %s", namespace, name,
                                     self.keep_failed_attempts, asked, checkpointing.run_name,
                                     attempt_of(by_name[name]), checkpointing.run_name, attempt_of(by_name[name]))
                    continue
                self.log.info("deleting ended JobSet %s/%s (%s) before the next attempt (checkpoints are kept): "
                              "asked by %s", namespace, name, phase, asked)
                api.delete(namespace, name, reason=V.DELETE_ATTEMPT_ENDED)
            obj = self._submit(api, workload, run_labels, ti, history)
            record = {"attempt": number, "try": ti.try_number, "jobset": obj["metadata"]["name"],
                      "start": time.time(), "end": None,
                      "outcome": None, "restarts": 0, "last_step": previous_step, "reason": ""}

            def remember(data: dict[str, Any]) -> None:
                data[HISTORY] = history
                if not any(r.get("jobset") == record["jobset"] for r in data[ATTEMPTS]):  # not on a reattach
                    data[ATTEMPTS].append(record)

            recorded = lock.update(remember)
            self._write_record(ti, namespace, checkpoint_dir, target_step, RUNNING,
                               recorded.get(ATTEMPTS) or [record], "attempt submitted")
            metrics.attempt_submitted(metrics.tags(ti.dag_id, ti.task_id, checkpointing.run_name,
                                                   connection.get("kind")), lock_data[ATTEMPTS], record["start"])
        name = obj["metadata"]["name"]
        self._current = (connection, namespace, name, {**_owner(ti), "run_name": checkpointing.run_name})
        persist_links(context, self._target(), namespace, name, checkpoint_dir, start=created_at(obj, time.time()),
                      replicated_job=workload.replicated_job_name)
        self._push_run(context, lock, checkpoint_dir, target_step, checkpointing.run_name)
        state = evaluate_jobset(obj)
        stall_timeout = None if self._completion or self.stall_timeout in (None, "") else float(self.stall_timeout)
        gcp_conn_id, impersonation_chain = self._google()
        from mtc_provider.core.progress import replicator_backup_dir
        from mtc_provider.triggers.jobset import JobSetTrigger

        trigger = JobSetTrigger(
            connection=connection, namespace=namespace, name=name,
            resource_version=obj["metadata"].get("resourceVersion"), restarts_seen=state.restarts,
            # The checkpoint directory is listed for stall detection and for the progress line.
            poll_interval=self.poll_interval, checkpoint_dir=None if self._completion else checkpoint_dir,
            stall_timeout=stall_timeout, gcp_conn_id=gcp_conn_id, impersonation_chain=impersonation_chain,
            startup_timeout=None if self.startup_timeout in (None, "") else float(self.startup_timeout),
            image_pull_timeout=None if self.image_pull_timeout in (None, "") else float(self.image_pull_timeout),
            capacity_log_interval=float(self.capacity_log_interval), listing_timeout=float(self.listing_timeout),
            progress_interval=None if self.progress_interval in (None, "") else float(self.progress_interval),
            api_outage_timeout=float(self.api_outage_timeout),
            pod_logs=bool(self.pod_logs), pod_logs_interval=float(self.pod_logs_interval),
            pod_logs_max_lines=int(self.pod_logs_max_lines), pod_logs_max_bytes=int(self.pod_logs_max_bytes),
            # The limit re-derived from the run's cadence, and (multi-tier) the replicator's backups as progress.
            stall_cadence=None if stall_timeout is None else (dict(self.stall_cadence) if self.stall_cadence else None),
            backup_dir=None if self._completion else replicator_backup_dir(checkpointing),
            # Echoed back in the event: the attempt's bookkeeping survives the deferral.
            extra={"attempt": attempt_of(obj), "history": history, "target_step": target_step,
                   "checkpoint_dir": checkpoint_dir, "run_name": checkpointing.run_name, "namespace": namespace,
                   # a plain retry may end in the triggerer (triggers.attempt_end); never the last try
                   "end_retry_in_trigger": bool(self.deferrable) and not self._last_try(ti),
                   "crash_loop_attempts": self.crash_loop_attempts, "completion": self._completion,
                   # the try that deferred: an event Airflow resumes another try with is not that try's end
                   "owner": _owner(ti)},
        )
        if self.deferrable:
            self.defer(trigger=trigger, method_name="execute_complete")
        # Synchronous path: the same trigger, run to its first event in this worker.
        return self.execute_complete(context, asyncio.run(_first_event(trigger)))

    def _wait_for_deletion(self, api, namespace: str, names: Sequence[str]) -> None:
        """Foreground deletion keeps a JobSet (and its pods, which may still write) for a while: wait, bounded."""
        deadline = time.monotonic() + float(self.deletion_timeout)
        pause = min(max(float(self.poll_interval), 0.0), 10.0)
        for name in names:
            logged = -1.0
            while True:
                try:
                    api.get(namespace, name)
                except NotFound:
                    self.log.info("JobSet %s/%s is gone", namespace, name)
                    break
                now = time.monotonic()
                if now >= deadline:
                    raise JobSetAttemptFailed(
                        f"JobSet {namespace}/{name} is still terminating after {self.deletion_timeout:.0f}s "
                        "(foreground deletion waits for its pods); check its pods and finalizers: kubectl get jobset "
                        f"-n {namespace} {name} -o yaml")
                if logged < 0 or now - logged >= 60:
                    self.log.info("waiting for JobSet %s/%s to finish terminating (deletionTimestamp set, its pods "
                                  "are stopping) before the next attempt; at most %.0fs", namespace, name,
                                  deadline - now)
                    logged = now
                time.sleep(pause)

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
            if L.belongs_to(labels, run_labels):
                mine.append(other)
            elif evaluate_jobset(other).live:
                raise AirflowFailException(
                    f"run_name {run_name!r} already has a live JobSet {namespace}/{other['metadata']['name']} "
                    f"(DAG {labels.get(L.DAG_ID)}, run {labels.get(L.RUN_ID)}): two JobSets must not write the same "
                    "checkpoints; wait for it, delete it, or use another run_name"
                )
        return mine

    def _submit(self, api, workload, run_labels, ti, history) -> dict[str, Any]:
        name, body = self._rendered[0], copy.deepcopy(self._rendered[1])  # rendered once, by _specs for this try
        body["metadata"].setdefault("annotations", {})[STEP_HISTORY_ANNOTATION] = json.dumps(history)
        if self.fault_plan:
            from mtc_provider.core.vocabulary import FAULT_PLAN_ANNOTATION

            body["metadata"]["annotations"][FAULT_PLAN_ANNOTATION] = json.dumps(self.fault_plan)
        try:
            created = api.create(workload.namespace, body)
            self.log.info("submitted JobSet %s/%s (attempt %s, try %s, newest finalized step %s)",
                          workload.namespace, name, attempt_of(body), ti.try_number, history[-1])
            return created
        except ApiUnreachable:
            raise  # an outage, not a rejection: execute() says so
        except AlreadyExists:
            existing = api.get(workload.namespace, name)
            if not L.belongs_to(existing["metadata"].get("labels"), run_labels):
                raise AirflowFailException(f"JobSet name {name} is taken by a JobSet of another run")
            self.log.info("JobSet %s already exists for this try: reattaching", name)
            return existing
        except ApiError as exc:
            if isinstance(exc, Forbidden) and exc.rbac:
                raise  # RBAC, not the spec: execute fails the try without releasing anything
            decision = decide_rejected(exc.status, str(exc))
            if decision.kind == FAIL:
                raise AirflowFailException(decision.reason) from exc
            raise JobSetAttemptFailed(decision.reason) from exc

    def _lock_for(self, context, connection, extra: Mapping[str, Any]) -> RunLock:
        ti = context["ti"]
        run_name = extra.get("run_name") or self._describe()[1].run_name
        namespace = extra.get("namespace") or self._describe()[2].namespace
        api = self._jobset_api(connection)
        return RunLock(lock_api(connection, api), namespace, run_name,
                       L.run_labels(ti.dag_id, ti.run_id, ti.task_id, run_name), _owner(ti))

    def _owner_gone(self, owner: Mapping[str, Any]) -> tuple[bool, str]:
        """Whether a run lock's owner is provably gone: Airflow (Task SDK) says its task ended or its run is gone."""
        from mtc_provider.adapters.task_state import try_lookup

        lookup, error = try_lookup(owner)
        return owner_gone(lookup, describe_owner(owner), error)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        ti = context.get("ti") if isinstance(context, Mapping) else None
        foreign = foreign_event((event.get("extra") or {}).get("owner"), _owner(ti)) if ti is not None else ""
        if foreign:  # not this attempt's end, whatever it says: this try's own JobSet is watched again
            return self._watch_again(context, f"{foreign}; its {event.get('kind')} of JobSet "
                                              f"{event.get('namespace')}/{event.get('name')} is not this try's")
        try:
            try:
                return self._complete(context, event)
            except NextAttemptInTry:
                if getattr(self, "_in_execute", False):  # the synchronous path: execute's loop submits it
                    raise
                return self.execute(context)  # deferred: this try submits the next attempt and defers again
            except JobSetForbidden:
                raise
            except Forbidden as exc:  # a 403 while closing the attempt: fail for good, delete nothing more
                raise _forbidden(str(exc)) from exc
            except PermissionDenied as exc:  # the storage's 403 while reading the attempt's end
                raise storage_forbidden(exc, str(event.get("checkpoint_dir") or self._describe()[1]
                                                 .checkpoint_directory), *self._google()) from exc
        except OrchestratorFault as fault:
            self._keep_for_teardown(context, fault)
            raise

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Any) -> Any:
        """A trigger that failed (Airflow's `__fail__`: it raised, or exited without an event) lost the watch, not
        the attempt: the JobSet does not depend on its watcher. The try watches its JobSet again (a live one is
        reattached to, as a retry would, without spending the retry), at most MAX_WATCH_FAILURES times per try;
        then, and on a trigger timeout, Airflow's own handling (TaskDeferralError). The failure may not even be this
        try's: Airflow fails whatever is deferred on the failed trigger's id (core.ownership.foreign_event)."""
        from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR, TriggerFailureReason

        kwargs = next_kwargs or {}
        ti = context.get("ti") if isinstance(context, Mapping) else None
        if next_method != TRIGGER_FAIL_REPR or kwargs.get("error") == TriggerFailureReason.TRIGGER_TIMEOUT \
                or ti is None:
            return super().resume_execution(next_method, next_kwargs, context)
        failures = self._watch_failures(ti) + 1
        if failures > MAX_WATCH_FAILURES:
            self.log.error("the trigger watching this try's JobSet failed %d times: Airflow's trigger failure "
                           "ends the try", failures)
            return super().resume_execution(next_method, next_kwargs, context)
        with contextlib.suppress(Exception):  # the count is a bound, never a reason to end the try
            ti.xcom_push(key=WATCH_FAILURES_XCOM_KEY, value={"try_number": ti.try_number, "failures": failures})
        traceback = kwargs.get("traceback")
        text = "".join(traceback) if isinstance(traceback, list) else str(traceback or "")
        self.log.warning("the trigger failed (%s)%s", kwargs.get("error") or "unknown",
                         f":\n{text.rstrip()}" if text else "")
        return self._watch_again(context, f"the trigger failed ({kwargs.get('error') or 'unknown'}; "
                                          f"{failures} of at most {MAX_WATCH_FAILURES} this try)")

    def _watch_failures(self, ti: Any) -> int:
        try:
            seen = ti.xcom_pull(task_ids=ti.task_id, key=WATCH_FAILURES_XCOM_KEY)
        except Exception:  # noqa: BLE001 - unreadable: counted from here
            return 0
        if isinstance(seen, Mapping) and seen.get("try_number") == ti.try_number:
            return int(seen.get("failures") or 0)
        return 0

    def _watch_again(self, context: Any, why: str) -> Any:
        """Not this attempt's end: the try runs its launch again, which reattaches to its live JobSet (or takes
        the result of an ended one) and defers with a new trigger; nothing is deleted, no retry is spent."""
        self.log.warning("%s: not this attempt's end; this try watches its own JobSet again (no retry spent)", why)
        return self.execute(context)

    def _complete(self, context: Any, event: dict[str, Any]) -> Any:
        ev = JobSetEvent.from_payload(event)
        if ev.kind == FORBIDDEN or (ev.kind == ERROR and "HTTP 403" in ev.message):
            # The triggerer's identity may not watch the JobSet or read its pods: the JobSet is left as it is.
            raise _forbidden(f"JobSet {ev.namespace}/{ev.name}: {ev.message}")
        if ev.kind == API_UNREACHABLE:  # before any request: the API is not answering
            self._current = None
            raise ApiUnreachableFailure(f"{ev.message} (JobSet {ev.namespace}/{ev.name}): {NOT_AN_ATTEMPT}")
        extra = ev.extra

        def complete() -> Any:
            try:
                return self._execute_complete(context, ev)
            except ApiUnreachable as exc:
                raise self._unreachable(exc) from exc

        return self._recorded(context, ev.namespace, extra.get("checkpoint_dir"), extra.get("target_step"),
                              ev.progress, complete)

    def _execute_complete(self, context: Any, ev: JobSetEvent) -> Any:
        extra = ev.extra
        if ev.progress:  # the trigger's latest progress figures, for dashboards and downstream tasks
            context["ti"].xcom_push(key=PROGRESS_XCOM_KEY, value=ev.progress)
        connection = self._current[0] if self._current else self._connection()
        store = self._store(extra["checkpoint_dir"])
        lock = self._lock_for(context, connection, extra)
        self._current = None
        if ev.state is not None and ev.state.restarts > ev.restarts_seen:  # the JobSet's own count is the truth
            ev = dataclasses.replace(ev, restarts_seen=ev.state.restarts)
        if ev.kind == ENDED and ev.state is not None:
            return self._finish(context, connection, lock, ev.state, extra["attempt"], extra["history"], store,
                                extra["checkpoint_dir"], extra["target_step"], ev.restarts_seen)
        latest = self._latest_or_none(store, extra["checkpoint_dir"])
        if ev.kind == LISTING_FAILED:  # training goes on: a retry reattaches; a 403 needs the user
            self._push(context, ev.namespace, ev.name, extra["attempt"], ev.restarts_seen, latest, ev.message, lock)
            if " 403" in ev.message or "HTTP 403" in ev.message:  # Airflow's identity: kept, like the cluster's 403
                raise storage_forbidden(PermissionDenied(ev.message), extra["checkpoint_dir"], *self._google())
            raise JobSetAttemptFailed(ev.message)
        if ev.kind == DELETED:
            lock.close_attempt(ev.name, FAILED_OUTCOME, ev.restarts_seen, latest, ev.message)
            self._push(context, ev.namespace, ev.name, extra["attempt"], ev.restarts_seen, latest, ev.message, lock)
            lock.release()  # the run fails for good: its run name is free again
            raise AirflowFailException(f"JobSet {ev.namespace}/{ev.name} was deleted outside this task")
        api = self._jobset_api(connection)
        ev = dataclasses.replace(ev, restarts_seen=self._restarts_now(api, ev))
        if ev.kind in (UNSTARTABLE, STARTUP_TIMEOUT):
            self.log.error("%s: deleting JobSet %s/%s", ev.message, ev.namespace, ev.name)
            api.delete(ev.namespace, ev.name, reason=V.DELETE_ATTEMPT_FAILED)
            lock.close_attempt(ev.name, FAILED_OUTCOME, ev.restarts_seen, latest, ev.message)
            self._push(context, ev.namespace, ev.name, extra["attempt"], ev.restarts_seen, latest, ev.message, lock)
            lock.release()
            raise AirflowFailException(ev.message)
        if ev.kind == STALLED:
            decision = decide_stalled(latest, extra["target_step"], extra["history"] or [None],
                                      self.crash_loop_attempts, why=ev.message)
            self.log.warning("attempt stalled (%s): deleting JobSet %s -> %s: %s", ev.message, ev.name,
                             decision.kind, decision.reason)
            if decision.kind != SUCCEED:
                api.delete(ev.namespace, ev.name, reason=V.DELETE_ATTEMPT_FAILED)
            outcome = FINISHED if decision.kind == SUCCEED else DISRUPTED
            history = extra["history"] or [None]
            in_try = resubmit_in_try(decision, history, latest)
            lock.close_attempt(ev.name, outcome, ev.restarts_seen, latest, decision.reason,
                               interruption_of(False) if outcome == DISRUPTED else None, in_try)
            result = self._push(context, ev.namespace, ev.name, extra["attempt"], ev.restarts_seen, latest,
                                decision.reason, lock)
            return self._conclude(context, lock, decision.kind, decision.reason, result, extra["target_step"],
                                  in_try_from=history[-1] if in_try else False)
        self._push(context, ev.namespace, ev.name, extra["attempt"], ev.restarts_seen, latest, ev.message or ev.kind,
                   lock)
        reason = f"lost track of JobSet {ev.namespace}/{ev.name}: {ev.message}"  # ERROR: a retry reattaches
        if self._last_try(context["ti"]):  # no retry will come: the run ends here, and frees its run name
            lock.release()
        raise JobSetAttemptFailed(reason)

    def _restarts_now(self, api, ev: JobSetEvent) -> int:
        """The attempt's in-cluster restarts for its record: the JobSet's `status.restarts` read now (before any
        delete), else what the trigger saw. A stall or start-up verdict can come before the trigger has seen the
        watch event of the latest restart; the record (and the demo summary's count) must not miss it."""
        try:
            return max(ev.restarts_seen, evaluate_jobset(api.get(ev.namespace, ev.name)).restarts)
        except ApiUnreachable:
            raise
        except Exception as exc:  # noqa: BLE001 - gone already, or unreadable: the trigger's count stands
            self.log.info("JobSet %s/%s not readable for its restart count (%s): recording the trigger's %d",
                          ev.namespace, ev.name, exc, ev.restarts_seen)
            return ev.restarts_seen

    def _finish(self, context, connection, lock: RunLock, state: JobSetState, attempt: int,
                history: list[int | None], store: CheckpointStore | None, checkpoint_dir: str, target_step: int,
                restarts: int) -> Any:
        latest = self._latest(store, checkpoint_dir)
        if self._completion:
            decision = decide_on_completion(state)
        else:
            decision = decide(state, latest, target_step, history or [None], self.crash_loop_attempts)
        self.log.info("%s; newest finalized step %s of %s -> %s: %s", state.describe(), latest, target_step,
                      decision.kind, decision.reason)
        if decision.kind != SUCCEED:  # why the attempt died, one click away: bounded tails of the failed pods
            log_failed_pod_tails(self.log, self._jobset_api(connection), state.namespace, state.name)
        outcome = {SUCCEED: FINISHED, FAIL: FAILED_OUTCOME}.get(decision.kind, DISRUPTED)
        # the same rule as the triggerer's end (triggers.attempt_end), so the record is the same whoever ends it
        in_try = not self._completion and resubmit_in_try(decision, history or [None], latest)
        lock.close_attempt(state.name, outcome, restarts, latest, decision.reason,
                           interruption_of(state.phase == SUCCEEDED) if outcome == DISRUPTED else None, in_try)
        result = self._push(context, state.namespace, state.name, attempt, restarts, latest, decision.reason, lock)
        return self._conclude(context, lock, decision.kind, decision.reason, result, target_step,
                              in_try_from=(history or [None])[-1] if in_try else False)

    def _conclude(self, context, lock: RunLock, kind: str, reason: str, result: dict[str, Any],
                  target_step: int | None = None, in_try_from: Any = False) -> Any:
        """Succeed, fail for good, or retry; the run lock goes with the run (success, final failure, last try).

        `in_try_from` (the attempt's start step; False: not so) marks a retry after progress: the same try submits
        the next attempt (NextAttemptInTry), on the last try too, and the run lock stays with the run."""
        if kind != SUCCEED and kind != FAIL and in_try_from is not False:
            line = in_try_line(reason, in_try_from, result.get("last_step"), int(result.get("attempt") or 0) + 1,
                               target_step)
            self.log.warning("%s", line)  # an interruption survived: not an error, and no retry is spent
            raise NextAttemptInTry(line)
        if kind == SUCCEED or kind == FAIL or self._last_try(context["ti"]):
            lock.release()
        if kind == SUCCEED:
            return result
        if kind == FAIL:
            raise AirflowFailException(reason)
        ti = context["ti"]
        if self._last_try(ti):
            raise JobSetAttemptFailed(f"{reason}; no retry left (try {ti.try_number} was the last)") from None
        line = resubmission_line(reason, result.get("last_step"), ti.try_number,
                                 getattr(ti, "max_tries", None) or self.retries, target_step)
        self.log.warning("%s", line)  # the one line that says what happens (Airflow's own ERROR line follows)
        raise JobSetAttemptFailed(line) from None

    def _last_try(self, ti) -> bool:
        return ti.try_number > (getattr(ti, "max_tries", None) or self.retries or 0)

    def _push_run(self, context, lock: RunLock, checkpoint_dir: str, target_step: int, run_name: str) -> None:
        """While the attempt runs: what the run view reads (plugins/run_view.py), since Airflow clears a task's
        XComs when its next try starts: the run's description and every attempt so far, this one still open."""
        context["ti"].xcom_push(key=RUN_XCOM_KEY, value={"checkpoint_dir": checkpoint_dir, "target_step": target_step,
                                                         "run_name": run_name})
        context["ti"].xcom_push(key=ATTEMPTS_XCOM_KEY, value=lock.read()[ATTEMPTS])

    def _push(self, context, namespace, name, attempt, restarts, latest, reason, lock: RunLock) -> dict[str, Any]:
        result = {"jobset_name": name, "namespace": namespace, "attempt": attempt, "restarts": restarts,
                  "last_step": latest, "reason": reason}
        context["ti"].xcom_push(key=XCOM_KEY, value=result)
        # Every attempt so far (a try's XComs are cleared when the next try starts, the lock keeps them).
        attempts = lock.read()[ATTEMPTS]
        self._attempts_seen = attempts  # for the run's record, written once the try's outcome is known
        context["ti"].xcom_push(key=ATTEMPTS_XCOM_KEY, value=attempts)
        self._relink_logs(context, namespace, name, attempts)
        return result

    def _relink_logs(self, context, namespace: str, name: str, attempts: list[dict[str, Any]]) -> None:
        """The logs link again, now scoped to the attempt's start..end (its record in the run lock)."""
        record = next((r for r in reversed(attempts) if r.get("jobset") == name), None)
        if record is None or record.get("start") is None:
            return
        try:
            persist_logs_link(context, self._target(), namespace, name, record["start"],
                              record.get("end") or time.time(),
                              self._describe()[2].replicated_job_name)
        except Exception as exc:  # noqa: BLE001 - a link must never change how the attempt ends
            self.log.warning("could not update the pod logs link of %s/%s: %s", namespace, name, exc)

    # --- the run's record beside its checkpoints (adapters.run_records; read by mtc status / mtc list) -------
    def _recorded(self, context, namespace: str, checkpoint_dir: str | None, target_step: int | None,
                  progress: Mapping[str, Any] | None, call: Callable[[], Any]) -> Any:
        """Run the end of an attempt, then record the run's state: succeeded, retrying, or failed. An
        orchestrator fault records nothing new (the JobSet may still be training)."""
        ti = context["ti"]
        try:
            result = call()
        except (OrchestratorFault, Forbidden):
            raise
        except NextAttemptInTry as exc:
            self._write_record(ti, namespace, checkpoint_dir, target_step, RETRYING, self._attempts_seen, str(exc),
                               progress)
            raise
        except JobSetAttemptFailed as exc:
            state = FAILED_RUN if self._last_try(ti) else RETRYING
            self._write_record(ti, namespace, checkpoint_dir, target_step, state, self._attempts_seen, str(exc),
                               progress)
            raise
        except AirflowFailException as exc:
            self._write_record(ti, namespace, checkpoint_dir, target_step, FAILED_RUN, self._attempts_seen, str(exc),
                               progress)
            raise
        self._write_record(ti, namespace, checkpoint_dir, target_step, SUCCEEDED_RUN, self._attempts_seen,
                           "training reached its target", progress)
        return result

    def _write_record(self, ti, namespace: str, checkpoint_dir: str | None, target_step: int | None, state: str,
                      attempts: Sequence[Mapping[str, Any]], reason: str,
                      progress: Mapping[str, Any] | None = None) -> None:
        """Best effort: a record that cannot be written is logged, and never changes how the attempt ends. A one-shot
        job (wait_for="completion", e.g. an evaluation reading a training run's checkpoints) writes none: the record
        beside those checkpoints is the training run's."""
        if not checkpoint_dir or self._completion:
            return
        try:
            from mtc_provider.adapters.run_records import record_run

            gcp_conn_id, impersonation_chain = self._google()
            run_name = ti_run_name(self, checkpoint_dir)
            where = record_run(checkpoint_dir, gcp_conn_id, impersonation_chain, run_name=run_name, namespace=namespace,
                               target_step=target_step, state=state, attempts=attempts, owner=_owner(ti),
                               reason=reason, progress=progress)
            self.log.info("run %s: %s, %d attempt(s) recorded in %s", run_name, state, len(attempts), where)
        except Exception as exc:  # noqa: BLE001 - the record is for people reading the run later
            self.log.warning("could not write the run's attempt record beside %s: %s", checkpoint_dir, exc)

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
        (core.ownership.kill_verdict).
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


def ti_run_name(task: Any, checkpoint_dir: str) -> str:
    """The run name of the task's checkpointing (rendered), else the directory's (`<base>/<run_name>/checkpoints`)."""
    checkpointing = task.checkpointing
    name = getattr(checkpointing, "run_name", None) or (checkpointing.get("run_name")
                                                         if isinstance(checkpointing, Mapping) else None)
    return str(name or checkpoint_dir.rstrip("/").rsplit("/", 2)[-2])


def keep_count(field: str, value: Any) -> int:
    """A count of JobSets to keep: an integer >= 0 (a rendered template is text; True means 1)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if not isinstance(value, int) or value < 0:
        raise SpecError(field, value, "an integer >= 0 (how many of the newest failed attempts' JobSets to keep)")
    return value


def kept_failed(jobsets: Sequence[Mapping[str, Any]], keep: int) -> set[str]:
    """The names of the newest `keep` failed JobSets among these ended attempts (by try number)."""
    from mtc_provider.core.status import FAILED

    failed = sorted((o for o in jobsets if evaluate_jobset(o).phase == FAILED), key=attempt_of)
    return {o["metadata"]["name"] for o in failed[len(failed) - keep:]} if keep > 0 else set()


async def _first_event(trigger: JobSetTrigger) -> dict[str, Any]:
    async for event in trigger.run():
        return event.payload
    return JobSetEvent(ERROR, trigger.namespace, trigger.name, message="the watch ended without an event").to_payload()


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
        api = targets.jobset_api(self._connection())
        if self.name:
            names, why = [self.name], "asked by name"
        else:
            ti = context["ti"]
            run_labels = L.run_labels(ti.dag_id, ti.run_id, self.launch_task_id, self.run_name)
            lock = RunLock(lock_api(self._connection(), api), self.namespace, self.run_name, run_labels)
            elsewhere = lock.held_elsewhere()
            if elsewhere:  # its JobSets may carry this run's labels: nothing here is ours to delete
                self.log.warning("teardown deletes nothing of run %s: its run lock %s/%s says %s", self.run_name,
                                 self.namespace, lock.name, elsewhere)
                return []
            found = api.list(self.namespace, L.selector(run_labels))
            kept, who = kept_failed(found, keep), describe_owner(_owner(ti))
            for name in sorted(kept):
                self.log.warning("teardown keeps failed JobSet %s/%s for debugging (keep_failed_attempts=%s, asked by "
                                 "%s): delete it with mtc delete %s", self.namespace, name, keep, who, self.run_name)
            names = [o["metadata"]["name"] for o in found if o["metadata"]["name"] not in kept]
            why = f"the teardown after the run ended (task {self.launch_task_id} is done; asked by {who})"
        for name in names:
            self.log.info("deleting JobSet %s/%s (checkpoints are kept): %s", self.namespace, name, why)
            api.delete(self.namespace, name, reason=V.DELETE_TEARDOWN)
        if not self.name:  # the run is over: free its run name (the lock of that launch task, if still held)
            lock.release()
        return names
