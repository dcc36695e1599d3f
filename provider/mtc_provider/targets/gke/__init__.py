"""The gke target's room: a GKE cluster (target.py), its Container API control plane (cluster.py) and its backend
(backend.py: the cluster's Kubernetes API through the google provider's hooks, GCS with the target's connection and
impersonation chain, Cloud Console links). Registered as `gke` in the `mtc_provider.targets` entry points."""

from __future__ import annotations

from typing import Any

from mtc_provider.targets.gke.target import GkeTarget
from mtc_provider.targets.registry import TargetKind


def _backend(target: Any, api_endpoint: str | None) -> Any:
    from mtc_provider.targets.gke.backend import GkeBackend

    return GkeBackend(target, api_endpoint)


def _jobset_api(connection: Any, **timeouts: Any) -> Any:
    from mtc_provider.targets.gke.backend import jobset_api

    return jobset_api(connection, **timeouts)


def _async_jobset_api(connection: Any, **options: Any) -> Any:
    from mtc_provider.targets.gke.backend import async_jobset_api

    return async_jobset_api(connection, **options)


def _describe(connection: Any) -> str:
    from mtc_provider.targets.gke.backend import describe

    return describe(connection)


KIND = TargetKind("gke", GkeTarget, _backend, _jobset_api, _async_jobset_api, _describe)
