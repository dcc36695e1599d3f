"""A kill's delete of a JobSet, waited through a short API outage within the time Airflow gives a kill.

A user's confirmed mark-failed or clear must stop the TPUs even when the Kubernetes API answers 503 for a few
seconds (a control-plane blip). Airflow gives a trigger's `on_kill` `[triggerer] on_kill_timeout` seconds in all (30
by default; airflow-core jobs/triggerer_job_runner.py `_ON_CANCEL_TIMEOUT`), the Task SDK lookup included, and a
SIGTERM'd task 5 s before its SIGKILL (task-sdk execution_time/supervisor.py `kill`, `escalation_delay`). The delete
is retried within what is left of that; when it still fails, the caller says who finishes it (the teardown after
the run ended, or the user's own command).
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Mapping

import tenacity

from mtc_provider.adapters.retry import ApiUnreachable, Retryable, describe_failure, wait_honouring_retry_after

MARGIN_S = 5.0  # left of on_kill_timeout for the log lines and the lock's release
MAX_WAIT_S = 2.0  # between delete attempts: a blip is seconds long


def trigger_budget(spent: float) -> float:
    """Seconds a trigger's on_kill may still spend deleting, `spent` seconds into it (at least 1)."""
    from airflow.configuration import conf

    total = conf.getfloat("triggerer", "on_kill_timeout", fallback=30.0)
    return max(1.0, total - spent - MARGIN_S)


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, (Retryable, ApiUnreachable))


async def adelete_within(delete: Callable[[], Awaitable[None]], budget: float) -> str:
    """`await delete()`, retried while the API is unreachable, for at most `budget` seconds: "" when it was
    accepted, else why it was not (the last failure, or the budget)."""
    retrying = tenacity.AsyncRetrying(retry=tenacity.retry_if_exception(_transient),
                                      stop=tenacity.stop_after_delay(budget),
                                      wait=wait_honouring_retry_after(0.2, MAX_WAIT_S), reraise=True)

    async def attempts() -> None:
        async for attempt in retrying:
            with attempt:
                await delete()

    try:
        await asyncio.wait_for(attempts(), budget)
        return ""
    except asyncio.TimeoutError:
        return f"no answer within {budget:.0f} s"
    except (Retryable, ApiUnreachable) as exc:
        return f"{describe_failure(exc)} for {budget:.0f} s"


def handoff(where: str, why: str, namespace: str, name: str) -> str:
    """The line that says a confirmed kill's delete did not get through, and who finishes it."""
    return (f"could not delete JobSet {where} for the confirmed user action ({why}): the API did not accept the "
            f"delete in time. The run's teardown (MtcDeleteJobSetOperator with run_name and launch_task_id, as in the "
            f"sample DAG) deletes it once the run has ended; without one: kubectl delete jobset -n {namespace} {name}")


async def live_attempts_of_try(sync_hook: Callable[[], Any], namespace: str, run_labels: Mapping[str, str],
                               try_number: Any, budget: float) -> tuple[list[str], str]:
    """(names of this task's live JobSets of try `try_number`, "") from one listing within `budget` seconds, or ([],
    why it could not be read). `sync_hook()`: the caller's blocking JobSet hook, asked for off the loop. Labels match
    the run, the task and the try exactly: another task's or another try's JobSet is never named. A hung request keeps
    its thread, not the caller."""
    from mtc_provider.core.attempt.status import evaluate_jobset
    from mtc_provider.core.basics import labels as L

    ours = {**run_labels, L.TRY_NUMBER: str(try_number)}

    def listing() -> list[str]:
        found = sync_hook().api.list(namespace, L.selector(ours))
        return [o["metadata"]["name"] for o in found  # the selector's equality, checked here too
                if L.belongs_to(o["metadata"].get("labels"), ours) and evaluate_jobset(o).live]

    try:
        return await asyncio.wait_for(asyncio.to_thread(listing), budget), ""
    except asyncio.TimeoutError:
        return [], f"no answer within {budget:.0f} s"
    except Exception as exc:  # noqa: BLE001 - the caller deletes what it knows and says what it could not check
        return [], f"{type(exc).__name__}: {exc}"
