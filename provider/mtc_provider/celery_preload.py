"""A Celery configuration for the launch worker that imports `mtc_provider.preload.PRELOAD` once, before the pool forks.

Celery forks its pool processes after the worker's main process has imported the configuration's `imports`
(celery.worker.WorkController: `init_worker` before the pool starts), so every try's task process inherits them
(mtc_provider.preload says what that saves). On the launch worker only (docs/deployment.md, "Worker slots on the
resubmission path"); everything else is Airflow's own default Celery configuration:

    AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS=mtc_provider.celery_preload.CELERY_CONFIG
"""

from __future__ import annotations

from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG

from mtc_provider.preload import PRELOAD

CELERY_CONFIG = {**DEFAULT_CELERY_CONFIG, "imports": (*(DEFAULT_CELERY_CONFIG.get("imports") or ()), *PRELOAD)}
