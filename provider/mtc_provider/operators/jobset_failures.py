"""How a try of the launch operator ends when it does not succeed: the exceptions Airflow sees, and the retry
policy that gives an expected resubmission its reason.

A retryable end (JobSetAttemptFailed) spends an Airflow retry; an orchestrator fault (an unreachable API, a missing
permission) fails the try for good without touching the JobSet or the run lock; NextAttemptInTry never reaches
Airflow (the same try submits the next attempt).
"""

from __future__ import annotations

from typing import Any

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from mtc_provider.adapters.airflow_private import retry_policy_classes

NOT_AN_ATTEMPT = ("a Kubernetes API outage, not a failure of the training attempt: no Airflow retry is spent on it, "
                  "and the JobSet was not touched (it keeps training). Once the API answers again, clear this task: "
                  "the next try reattaches to the JobSet")


class JobSetAttemptFailed(AirflowException):
    """This attempt ended without reaching the target step, for a retryable reason: Airflow retries resubmit."""


class NextAttemptInTry(Exception):
    """This attempt was interrupted after it made progress (core.attempt.resubmission.resubmit_in_try): its record is
    closed, and the same try submits the next attempt (`execute` again) instead of spending an Airflow retry.
    Never reaches Airflow: `execute` and `execute_complete` catch it."""


RetryDecision, RetryPolicy = retry_policy_classes()  # Airflow 3.3's pluggable retry policies; None: Airflow's own


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


class WatchLost(OrchestratorFault):
    """The last try lost its watch of a JobSet that may still be training (an error that lasted, such as a 401, or
    an unexpected exception in the provider): no retry is left to reattach, so the try ends, but like any fault of
    the orchestrator it leaves the JobSet and the run lock as they are, and the teardown keeps them. Clear the task
    once the cause is fixed: it reattaches."""


class JobSetForbidden(OrchestratorFault):
    """A 403 from the cluster: no retry grants a permission, so the try fails for good at once. Nothing is deleted
    and the run lock is kept (a JobSet may be training): grant the permission, then clear the task to reattach."""


LEFT_AS_IS = ("nothing was deleted for it and the run lock is kept; once the permission is granted "
              "(docs/deployment.md, RBAC), clear this task: it reattaches to a live JobSet")


def forbidden(message: str) -> JobSetForbidden:
    return JobSetForbidden(f"{message}; {LEFT_AS_IS}")


class StorageForbidden(OrchestratorFault):
    """A 403 from the checkpoint storage for Airflow's own identity (listing the run's checkpoints): handled like
    the cluster's 403. The JobSet, which writes with its own identity, may be training: nothing is deleted, the run
    lock is kept, and the message says which identity lacks which permission on which bucket."""


def storage_forbidden(exc: BaseException, checkpoint_dir: str, gcp_conn_id: str, impersonation_chain: Any) -> \
        StorageForbidden:
    from mtc_provider.core.definition.description.spec import bucket_of

    bucket = f"bucket {bucket_of(checkpoint_dir)}" if checkpoint_dir.startswith("gs://") else checkpoint_dir
    who = f"the Airflow connection {gcp_conn_id!r}" + (f" impersonating {impersonation_chain!r}"
                                                      if impersonation_chain else "")
    permission = getattr(exc, "permission", "") or "storage.objects.list (roles/storage.objectViewer)"
    return StorageForbidden(f"{who} may not read the run's checkpoints in {bucket}: missing {permission} "
                            f"({exc}); {LEFT_AS_IS.replace('(docs/deployment.md, RBAC)', '(docs/deployment.md)')}")


