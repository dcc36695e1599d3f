"""The local target's room: the target (data: a home folder), its backend (backend.py: the home's local
Kubernetes API server, started on demand, cluster.py; this machine's facts for readiness, machine.py; the home's
local GCS, gcs.py), reached by the provider's one target registry through this distribution's
`mtc_provider.targets` entry point (`local = "mtc_local.target:KIND"`). The provider itself never imports it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from mtc_provider.target import default_local_home
from mtc_local.target.rules import RULES
from mtc_provider.targets.registry import TargetKind


@dataclass
class LocalTarget:
    """The embedded default: JobSets run as local processes; the bucket is a local directory."""

    home: str = field(default_factory=default_local_home)
    namespace: str = "default"

    template_fields: Sequence[str] = field(default=("home",), repr=False, compare=False)
    kind: str = field(default="local", init=False)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("template_fields")
        return data


def _backend(target: LocalTarget, api_endpoint: str | None) -> Any:
    from mtc_local.target.backend import LocalBackend

    return LocalBackend(target, api_endpoint)


def _jobset_api(connection: Mapping[str, Any], **timeouts: Any) -> Any:
    """The same adapter as GKE's; only how the client is made differs (from <home>/kubeconfig: cluster.py)."""
    from mtc_local.target.cluster import client_factory
    from mtc_provider.targets.common import kubernetes_jobset_api

    return kubernetes_jobset_api(client_factory(connection["home"]), _describe(connection), **timeouts)


def _async_jobset_api(connection: Mapping[str, Any], **options: Any) -> Any:
    from mtc_local.target.cluster import async_client_factory
    from mtc_provider.targets.common import async_kubernetes_jobset_api

    return async_kubernetes_jobset_api(async_client_factory(connection["home"]), _describe(connection), **options)


def _describe(connection: Mapping[str, Any]) -> str:
    return f"local cluster of {connection.get('home')}"


def _store_for_path(path: Path) -> Any:
    from mtc_local.target.gcs import LocalBucketCheckpointStore, local_bucket_of

    located = local_bucket_of(path)
    return LocalBucketCheckpointStore(*located) if located is not None else None


KIND = TargetKind("local", LocalTarget, _backend, _jobset_api, _async_jobset_api, _describe, _store_for_path,
                  rules=RULES)
