"""The kubernetes target's room: any cluster with JobSet installed (target.py) and its backend
(backend.py: the cluster through the cncf.kubernetes provider's KubernetesHook, GCS through the Google
connection; no managed control plane). Registered as `kubernetes` in the `mtc_provider.targets` entry points."""

from __future__ import annotations

from typing import Any

from mtc_provider.targets.kubernetes.target import KubernetesTarget
from mtc_provider.targets.registry import TargetKind


def _backend(target: Any, api_endpoint: str | None) -> Any:
    from mtc_provider.targets.kubernetes.backend import KubernetesBackend

    return KubernetesBackend(target, api_endpoint)


def _jobset_api(connection: Any, **timeouts: Any) -> Any:
    from mtc_provider.targets.kubernetes.backend import jobset_api

    return jobset_api(connection, **timeouts)


def _async_jobset_api(connection: Any, **options: Any) -> Any:
    from mtc_provider.targets.kubernetes.backend import async_jobset_api

    return async_jobset_api(connection, **options)


def _describe(connection: Any) -> str:
    from mtc_provider.targets.kubernetes.backend import describe

    return describe(connection)


KIND = TargetKind("kubernetes", KubernetesTarget, _backend, _jobset_api, _async_jobset_api, _describe)
