"""What the backends of every target share: checkpoints listed by folder, and the JobSet API over a Kubernetes
client (every target's cluster is a Kubernetes API server; only how its client is made differs)."""

from __future__ import annotations

from typing import Any, Callable

from mtc_provider.adapters.protocols import AsyncJobSetApi, CheckpointStore, JobSetApi
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.basics.kind_rules import no_faults_on


class ListsCheckpointsByPath:
    """The checkpoint store every backend uses: chosen by the folder (gs://, a local bucket, a directory), read with
    the backend's own Google connection."""

    def google(self) -> tuple[str, Any]:  # pragma: no cover - each backend defines it
        raise NotImplementedError

    def checkpoint_store(self, checkpoint_dir: str) -> CheckpointStore:
        from mtc_provider.adapters.checkpoint_stores import open_store

        return open_store(checkpoint_dir, *self.google())


class InjectsNoFaults:
    """A backend whose pods run on real kubelets: nothing there would inject a fault plan, so one is refused."""

    def put_fault_plan(self, body: dict[str, Any], plan: Any) -> None:
        if plan:
            raise SpecError("fault_plan", plan, no_faults_on(self.target.kind))  # type: ignore[attr-defined]


def kubernetes_jobset_api(client_factory: Callable[[], Any], where: str, *, request_timeout: float | None = None,
                          outage_timeout: float = 0.0) -> JobSetApi:
    """adapters.kubernetes.KubernetesJobSetApi over `client_factory` (a kubernetes.client.ApiClient per call)."""
    from mtc_provider.adapters import kubernetes

    return kubernetes.KubernetesJobSetApi(client_factory, where=where,
                                          request_timeout=request_timeout or kubernetes.REQUEST_TIMEOUT,
                                          outage_timeout=outage_timeout)


def async_kubernetes_jobset_api(client_factory: Callable[[], Any], where: str, *, poll_interval: float = 30.0,
                                request_timeout: float | None = None) -> AsyncJobSetApi:
    """adapters.kubernetes.AsyncKubernetesJobSetApi over `client_factory` (an async context of a
    kubernetes_asyncio ApiClient per use)."""
    from mtc_provider.adapters import kubernetes

    return kubernetes.AsyncKubernetesJobSetApi(client_factory, poll_interval=poll_interval, where=where,
                                               request_timeout=request_timeout or kubernetes.REQUEST_TIMEOUT)


def jobset_version_checks(client_factory: Callable[[], Any]) -> list[Any]:
    """Readiness on every cluster target: JobSet installed and new enough to keep the provider's failure policy
    (core.definition.render.jobset_crd), from the CRD the cluster serves."""
    from mtc_provider.adapters.kubernetes import read_jobset_crd
    from mtc_provider.core.definition.render.jobset_crd import jobset_crd_check

    api_client = client_factory()
    try:
        return [jobset_crd_check(*read_jobset_crd(api_client))]
    finally:
        close = getattr(api_client, "close", None)
        if close:
            close()
