"""A run's figures as metrics, through Airflow's own Stats (StatsD, Datadog or OpenTelemetry, as `[metrics]` says).

Names are all under `mtc.`; tags are dag_id, task_id, run_name and target (the connection kind). Like Airflow's own
metrics (airflow/_shared/observability/metrics/stats.py), a metric is sent with its tags and, while
`[metrics] legacy_names_on` is true (Airflow's default), once more with dag_id and task_id in its name
(`mtc.attempts.<dag_id>.<task_id>`, dots in them as `__`), because plain StatsD drops tags.

Which Stats: Airflow keeps two copies of the module, and each process initializes its own: the task SDK's in a
worker (`airflow.sdk.observability.stats`, task_runner.main), airflow-core's in the triggerer
(`airflow.observability.stats`, TriggererJobRunner._execute, inherited by the forked trigger runner). The one
initialized here is used; when neither is (a script, a test), the SDK's is initialized from `[metrics]`.

In a trigger's event loop: StatsD sends one UDP datagram per metric (the `statsd` client's sendto; errors
swallowed), which never waits for a reader. Metrics never fail a task: any error is logged and dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

log = logging.getLogger(__name__)

PREFIX = "mtc"
ATTEMPTS = f"{PREFIX}.attempts"
IN_CLUSTER_RESTARTS = f"{PREFIX}.in_cluster_restarts"
STEPS_PER_HOUR = f"{PREFIX}.steps_per_hour"
SECONDS_SINCE_CHECKPOINT = f"{PREFIX}.seconds_since_checkpoint"
GOODPUT = f"{PREFIX}.goodput"
RESUBMISSION_LATENCY = f"{PREFIX}.resubmission_latency"
STALLS = f"{PREFIX}.stalls"
API_OUTAGES = f"{PREFIX}.api_outages"
API_OUTAGE_SECONDS = f"{PREFIX}.api_outage_seconds"

# the tags that also go into the name for plain StatsD, in this order (as Airflow's ti.finish.{dag_id}.{task_id})
NAME_TAGS = ("dag_id", "task_id")


def tags(dag_id: Any = None, task_id: Any = None, run_name: Any = None, target: Any = None) -> dict[str, str]:
    """The tags of a run's metrics; unknown ones are left out."""
    found = {"dag_id": dag_id, "task_id": task_id, "run_name": run_name, "target": target}
    return {key: str(value) for key, value in found.items() if value not in (None, "")}


def trigger_tags(trigger: Any) -> dict[str, str]:
    """A JobSet trigger's tags: its task instance, its run name and connection kind.

    The triggerer sets `task_instance` (a RuntimeTaskInstance, or the workload's TI: airflow/jobs/
    triggerer_job_runner.py TriggerRunner.create_triggers); the synchronous path's trigger has none.
    """
    ti = getattr(trigger, "task_instance", None)
    return tags(getattr(ti, "dag_id", None), getattr(ti, "task_id", None), trigger.extra.get("run_name"),
                trigger.connection.get("kind"))


def _stats():
    """The Stats module this process's Airflow initialized (worker: the SDK's; triggerer: airflow-core's)."""
    from mtc_provider.adapters.airflow_private import stats_factory, stats_modules

    modules = stats_modules()
    for module in modules:
        if getattr(module, "_factory", None) is not None:
            return module
    sdk_stats = modules[0]
    sdk_stats.initialize(factory=stats_factory(), export_legacy_names=_legacy_names_on())
    return sdk_stats


def _legacy_names_on() -> bool:
    from airflow.sdk import conf

    return conf.getboolean("metrics", "legacy_names_on", fallback=True)


def _send(kind: str, name: str, value: Any, run_tags: Mapping[str, str]) -> None:
    """One metric, tagged, and (legacy names on) once more with dag_id.task_id in its name; never raises."""
    try:
        stats = _stats()
        send = {"incr": lambda n, t: stats.incr(n, count=value, tags=t), "gauge": lambda n,
                t: stats.gauge(n, value, tags=t), "timing": lambda n, t: stats.timing(n, value, tags=t)}[kind]
        send(name, dict(run_tags))
        in_name = [run_tags[key].replace(".", "__") for key in NAME_TAGS if key in run_tags]
        if in_name and _legacy_names_on():
            send(".".join([name, *in_name]), {k: v for k, v in run_tags.items() if k not in NAME_TAGS})
    except Exception as exc:  # metrics are advisory: never fail the task or the watch
        log.warning("metric %s not sent: %s: %s", name, type(exc).__name__, exc)


def attempt_submitted(run_tags: Mapping[str, str], records: Sequence[Mapping[str, Any]], created_at: float) -> None:
    """A new attempt's JobSet was created: count it, and time it from the previous attempt's recorded end."""
    _send("incr", ATTEMPTS, 1, run_tags)
    ends = [r["end"] for r in records if r.get("end") is not None]
    if ends:
        _send("timing", RESUBMISSION_LATENCY, timedelta(seconds=max(0.0, created_at - max(ends))), run_tags)


def in_cluster_restarts(run_tags: Mapping[str, str], new: int) -> None:
    """JobSet restarted all slices in the cluster `new` more times (its own failurePolicy, no resubmission)."""
    if new > 0:
        _send("incr", IN_CLUSTER_RESTARTS, new, run_tags)


def progress(run_tags: Mapping[str, str], steps_per_hour: float | None, seconds_since_checkpoint: float | None) -> None:
    """The progress line's figures; an unknown one (fewer than two checkpoints, none yet) is not sent."""
    if steps_per_hour is not None:
        _send("gauge", STEPS_PER_HOUR, float(steps_per_hour), run_tags)
    if seconds_since_checkpoint is not None:
        _send("gauge", SECONDS_SINCE_CHECKPOINT, float(seconds_since_checkpoint), run_tags)


def stalled(run_tags: Mapping[str, str]) -> None:
    """The attempt made no checkpoint progress for stall_timeout."""
    _send("incr", STALLS, 1, run_tags)


def api_outage(run_tags: Mapping[str, str], failures: int, seconds: float) -> None:
    """At each "Kubernetes API unreachable" line: count the outage at its first failure, gauge how long it lasts."""
    if failures == 1:
        _send("incr", API_OUTAGES, 1, run_tags)
    _send("gauge", API_OUTAGE_SECONDS, float(seconds), run_tags)


def goodput(run_tags: Mapping[str, str], fraction: float) -> None:
    """The goodput report's fraction of wall time spent on training kept by a checkpoint (0..1)."""
    _send("gauge", GOODPUT, float(fraction), run_tags)
