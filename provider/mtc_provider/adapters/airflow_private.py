"""The Airflow internals the provider needs where no public API serves, in one place.

Airflow's public interface is the `airflow.sdk` namespace (docs: public-airflow-interface.html); every name here
lives in a module a minor release may move. Each is imported where it is used: the triggerer loads the provider on
its event loop, and a worker with the Task SDK alone has no airflow-core. PRIVATE_NAMES lists them all, and
tests/adapters/test_airflow_private.py imports each on the installed Airflow (naming the versions it was checked
on), so a release that moves one fails that test naming it, not a task at run time.
"""

from __future__ import annotations

from typing import Any

# (module, name): what the provider reads there. An annotation-only module attribute counts as present.
PRIVATE_NAMES: tuple[tuple[str, str], ...] = (
    ("airflow.sdk.execution_time.task_runner", "SUPERVISOR_COMMS"),
    ("airflow.sdk.execution_time.task_runner", "RuntimeTaskInstance"),
    ("airflow.sdk.execution_time.comms", "GetTaskStates"),
    ("airflow.sdk.execution_time.comms", "SetXCom"),
    ("airflow.sdk.execution_time.xcom", "XCom"),
    ("airflow.sdk._shared.observability.metrics", "stats"),
    ("airflow._shared.observability.metrics", "stats"),
    ("airflow.sdk.observability.metrics", "stats_utils"),
    ("airflow.sdk.bases.operator", "TRIGGER_FAIL_REPR"),
    ("airflow.sdk.bases.operator", "TriggerFailureReason"),
    ("airflow.utils.net", "get_hostname"),
)


def supervisor_comms() -> Any:
    """This process's channel to its supervisor (a worker's task supervisor, or the triggerer's
    TriggerRunnerSupervisor, whose decoder also has `asend`), or None outside one.

    Private: `task_runner.SUPERVISOR_COMMS`. No public API lets a trigger send a request to its supervisor (the
    public TaskInstance methods exist only inside a running task), and cncf.kubernetes' KubernetesPodTrigger reads
    the same attribute.
    """
    from airflow.sdk.execution_time import task_runner

    return getattr(task_runner, "SUPERVISOR_COMMS", None)


def get_task_states(**query: Any) -> Any:
    """`{run_id: {task key: state}}` for dag_id/task_ids/run_ids/map_index, asked through the process's supervisor.

    Private: `RuntimeTaskInstance.get_task_states`. `airflow.sdk.TaskInstance` declares the method only as a
    protocol stub; the runtime class that implements it is in execution_time.
    """
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    return RuntimeTaskInstance.get_task_states(**query)


def get_task_states_request(**query: Any) -> Any:
    """The `GetTaskStates` message, for a trigger's async comms (`asend`), which no public API sends.

    Private: `execution_time.comms.GetTaskStates`, the message the triggerer's supervisor answers with
    `handle_get_task_states`.
    """
    from airflow.sdk.execution_time.comms import GetTaskStates

    return GetTaskStates(**query)


def set_xcom_request(**fields: Any) -> Any:
    """The `SetXCom` message, so a trigger stores a task's XCom while the task is deferred.

    Private: `execution_time.comms.SetXCom`. The public `xcom_push` lives on a running task's instance; a
    trigger has none.
    """
    from airflow.sdk.execution_time.comms import SetXCom

    return SetXCom(**fields)


def xcom_backend() -> Any:
    """The configured XCom backend class (serialize_value, get_value, get_all).

    Private: `execution_time.xcom.XCom`, resolved from `[core] xcom_backend`. The public `airflow.sdk.BaseXCom`
    is the default backend only (a custom backend's (de)serialization would be skipped), and an operator link's
    get_link gets a ti_key, not a task instance with `xcom_pull`; the Google and cncf providers read it the same way.
    """
    from airflow.sdk.execution_time.xcom import XCom

    return XCom


def stats_modules() -> list[Any]:
    """The Stats modules this process's Airflow may have initialized: the Task SDK's (a worker), then
    airflow-core's (the triggerer), when airflow-core is installed.

    Private: `airflow.sdk._shared.observability.metrics.stats` and `airflow._shared.observability.metrics.stats`.
    Airflow 3 has no public metrics API for providers: its Stats facade is vendored per distribution.
    """
    from airflow.sdk._shared.observability.metrics import stats as sdk_stats

    try:
        from airflow._shared.observability.metrics import stats as core_stats
    except ImportError:  # a worker with the Task SDK only
        return [sdk_stats]
    return [sdk_stats, core_stats]


def stats_factory() -> Any:
    """The Stats factory `[metrics]` configures (StatsD, OpenTelemetry, Datadog), to initialize the SDK's Stats in
    a process where Airflow did not.

    Private: `airflow.sdk.observability.metrics.stats_utils.get_stats_factory`, outside `airflow.sdk.__all__`
    and undocumented.
    """
    from airflow.sdk.observability.metrics import stats_utils

    return stats_utils.get_stats_factory()


def retry_policy_classes() -> tuple[Any, Any]:
    """(RetryDecision, RetryPolicy): the public `airflow.sdk` names where the Task SDK exports them (1.3.2 does),
    else their module's (`airflow.sdk.definitions.retry_policy`, where AIP-105 put them in Airflow 3.3), else
    (None, None): an Airflow without retry policies, whose default retry logic then applies."""
    try:
        from airflow.sdk import RetryDecision, RetryPolicy
    except ImportError:  # pragma: no cover - a Task SDK that does not export them (yet)
        try:
            from airflow.sdk.definitions.retry_policy import RetryDecision, RetryPolicy
        except ImportError:
            return None, None
    return RetryDecision, RetryPolicy


def trigger_failure() -> tuple[str, str]:
    """(the `next_method` Airflow resumes a task with when its trigger failed, the error value of a trigger timeout).

    Private: `airflow.sdk.bases.operator.TRIGGER_FAIL_REPR` and `TriggerFailureReason`, which `airflow.sdk`
    does not export; an operator overriding `resume_execution` must tell a failed trigger from a timeout.
    """
    from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR, TriggerFailureReason

    return TRIGGER_FAIL_REPR, TriggerFailureReason.TRIGGER_TIMEOUT


def hostname() -> str:
    """The host name Airflow reports for this component (`[core] hostname_callable`).

    Private: `airflow.utils.net.get_hostname` (airflow-core). The Task SDK has no public way to read the
    configured callable's answer.
    """
    from airflow.utils.net import get_hostname

    return get_hostname()
