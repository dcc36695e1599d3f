"""Pick the JobSetApi for a target.

`connection_for(target)` resolves, once, everything a client needs into a dict of serializable,
non-secret primitives (GKE: endpoint, CA, connection id, impersonation chain; local: the home
directory, whose kubeconfig the cncf.kubernetes hooks read: the local cluster is a Kubernetes API server). Operators call it; triggers receive the dict and rebuild an async api from it, minting a
fresh token per client. `register(kind, ...)` replaces the api for a target kind (tests use the
in-memory fake this way: no monkeypatching).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Mapping

from mtc_provider.adapters.protocols import AsyncJobSetApi, JobSetApi
from mtc_provider.core.errors import SpecError
from mtc_provider.target import Target, target_from_dict

SyncFactory = Callable[[Mapping[str, Any]], JobSetApi]
AsyncFactory = Callable[[Mapping[str, Any]], AsyncJobSetApi]
KINDS = ("gke", "kubernetes", "local")
_registry: dict[str, tuple[SyncFactory, AsyncFactory]] = {}


def register(kind: str, sync_factory: SyncFactory, async_factory: AsyncFactory) -> None:
    """Serve `kind` connections with these factories (each gets the connection dict)."""
    _registry[kind] = (sync_factory, async_factory)


def unregister(kind: str) -> None:
    _registry.pop(kind, None)


@contextlib.contextmanager
def registered(kind: str, sync_factory: SyncFactory, async_factory: AsyncFactory) -> Iterator[None]:
    previous = _registry.get(kind)
    register(kind, sync_factory, async_factory)
    try:
        yield
    finally:
        if previous is None:
            unregister(kind)
        else:
            _registry[kind] = previous


def connection_for(target: Target | Mapping[str, Any] | None, kubernetes_conn_id: str | None = None) -> dict[str, Any]:
    """Serializable connection details for a target. For GKE this reads the cluster (endpoint, CA) once."""
    if kubernetes_conn_id:
        return {"kind": "kubernetes", "kubernetes_conn_id": kubernetes_conn_id}
    target = target_from_dict(target)
    if target.kind in _registry:
        return target.to_dict()
    from mtc_provider.adapters.targets import backend_for

    return backend_for(target).jobset_connection()


def _kind(connection: Mapping[str, Any]) -> str:
    kind = connection.get("kind")
    if kind not in _registry and kind not in KINDS:
        raise SpecError("connection.kind", kind, " or ".join(KINDS + tuple(k for k in _registry if k not in KINDS)))
    return kind


def describe_connection(connection: Mapping[str, Any]) -> str:
    """How a 403 names the connection, beside the identity the API server names (no secrets: ids and names only)."""
    kind = connection.get("kind")
    if kind == "kubernetes":
        return f"kubernetes connection {connection.get('kubernetes_conn_id')}"
    if kind == "local":
        return f"local cluster of {connection.get('home')}"
    if kind == "gke":
        chain = connection.get("impersonation_chain")
        return (f"GKE cluster {connection.get('project_id')}/{connection.get('location')}/"
                f"{connection.get('cluster_name')} via {connection.get('gcp_conn_id')}"
                + (f" impersonating {chain}" if chain else ""))
    return f"connection kind {kind}"


def jobset_api(connection: Mapping[str, Any], *, request_timeout: float | None = None,
               outage_timeout: float = 0.0) -> JobSetApi:
    """The sync api (operators, the delete operator, the sensor's first look).

    :param request_timeout: client-side seconds per request (default adapters.kubernetes.REQUEST_TIMEOUT).
    :param outage_timeout: seconds an unreachable API is waited out before ApiUnreachable (0: bounded retries only).
    """
    kind = _kind(connection)
    if kind in _registry:
        return _registry[kind][0](connection)
    import functools

    from mtc_provider.adapters import kubernetes

    KubernetesJobSetApi = functools.partial(  # noqa: N806 - the class, with this call's timeouts
        kubernetes.KubernetesJobSetApi, request_timeout=request_timeout or kubernetes.REQUEST_TIMEOUT,
        outage_timeout=outage_timeout)

    if kind == "local":  # the same adapter; only how the client is made differs
        from mtc_local.target.cluster import client_factory

        return KubernetesJobSetApi(client_factory(connection["home"]), where=describe_connection(connection))
    if kind == "kubernetes":
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

        hook = KubernetesHook(conn_id=connection["kubernetes_conn_id"])
        return KubernetesJobSetApi(hook.get_conn, where=describe_connection(connection))
    from airflow.providers.google.cloud.hooks.kubernetes_engine import GKEKubernetesHook

    hook = GKEKubernetesHook(cluster_url=connection["cluster_url"], ssl_ca_cert=connection["ssl_ca_cert"],
                             gcp_conn_id=connection["gcp_conn_id"],
                             impersonation_chain=connection.get("impersonation_chain"),
                             use_dns_endpoint=bool(connection.get("use_dns_endpoint")))
    # get_conn builds a client with a fresh token each call
    return KubernetesJobSetApi(hook.get_conn, where=describe_connection(connection))


def async_jobset_api(connection: Mapping[str, Any], poll_interval: float = 30.0, *,
                     request_timeout: float | None = None) -> AsyncJobSetApi:
    """The async api for triggers, rebuilt from the connection dict inside the triggerer.

    :param request_timeout: client-side seconds per request (default adapters.kubernetes.REQUEST_TIMEOUT); the
        GKE async hook's client has none of its own.
    """
    kind = _kind(connection)
    if kind in _registry:
        return _registry[kind][1](connection)
    import functools

    from mtc_provider.adapters import kubernetes

    AsyncKubernetesJobSetApi = functools.partial(  # noqa: N806 - the class, with this call's timeout
        kubernetes.AsyncKubernetesJobSetApi, request_timeout=request_timeout or kubernetes.REQUEST_TIMEOUT)

    if kind == "local":
        from mtc_local.target.cluster import async_client_factory

        return AsyncKubernetesJobSetApi(async_client_factory(connection["home"]), poll_interval=poll_interval,
                                        where=describe_connection(connection))
    if kind == "kubernetes":
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

        hook = AsyncKubernetesHook(conn_id=connection["kubernetes_conn_id"])
        return AsyncKubernetesJobSetApi(hook.get_conn, poll_interval=poll_interval,
                                        where=describe_connection(connection))
    from airflow.providers.google.cloud.hooks.kubernetes_engine import GKEKubernetesAsyncHook

    hook = GKEKubernetesAsyncHook(cluster_url=connection["cluster_url"], ssl_ca_cert=connection["ssl_ca_cert"],
                                  gcp_conn_id=connection["gcp_conn_id"],
                                  impersonation_chain=connection.get("impersonation_chain"),
                                  use_dns_endpoint=bool(connection.get("use_dns_endpoint")))
    return AsyncKubernetesJobSetApi(hook.get_conn, poll_interval=poll_interval, where=describe_connection(connection))
