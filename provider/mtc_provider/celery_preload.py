"""A Celery configuration for the launch worker that imports, once, what every launch try imports on first use.

A launch try's task process is forked from its Celery worker's pool process, which Celery forks from the worker's
main process after it has imported the configuration's `imports` (celery.worker.WorkController: `init_worker`
before the pool starts). The Kubernetes client, the cncf.kubernetes and google hooks and the provider's operator
cost a task process seconds of CPU on its first request (docs/benchmarks.md, section 2: 3.2 s on an idle 2-core
machine, tens of seconds when many tries start together); imported here, every try inherits them. The list is
`mtc_provider.preload.PRELOAD`, which the LocalExecutor's preload (`mtc_provider.executors.local`) imports too.

    AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS=mtc_provider.celery_preload.CELERY_CONFIG

on the launch worker only (docs/deployment.md, "Worker slots on the resubmission path"); everything else is
Airflow's own default Celery configuration.
"""

from __future__ import annotations

from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG

from mtc_provider.preload import PRELOAD

CELERY_CONFIG = {**DEFAULT_CELERY_CONFIG,
                 "imports": (*(DEFAULT_CELERY_CONFIG.get("imports") or ()), *PRELOAD)}
