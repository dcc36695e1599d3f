"""JobSetApi / AsyncJobSetApi over the Kubernetes API (custom objects, jobset.x-k8s.io/v1alpha2).

Transport only: each request opens a client from a factory (so every client carries a fresh token:
GKE tokens expire during long waits) and maps errors through `to_api_error`. Transient answers
(429, 5xx, connection errors) are retried with one bounded exponential backoff policy (tenacity).
The watch resumes from the last resourceVersion, relists on 410 Gone, opens a new client on 401,
and falls back to polling when watching keeps failing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import socket
from typing import Any, AsyncContextManager, AsyncIterator, Callable

import tenacity
from airflow.sdk.exceptions import AirflowFailException

from mtc_provider.adapters import retry
from mtc_provider.adapters.protocols import ApiError, NotFound, WatchEvent
from mtc_provider.core.vocabulary import (
    DELETE_CALLER_HEADER,
    DELETE_LOCK_RELEASED,
    DELETE_REASON_HEADER,
    DELETE_UNSPECIFIED,
    JOBSET,
    JOBSET_NAME_LABEL,
)

GROUP, VERSION, PLURAL = JOBSET.group, JOBSET.version, JOBSET.plural
log = logging.getLogger(__name__)


def to_api_error(exc: BaseException) -> BaseException:
    """Map a kubernetes / kubernetes_asyncio / connection error through the provider's one mapping."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, (OSError, asyncio.TimeoutError)) or type(exc).__module__.split(".")[0] in ("aiohttp", "urllib3"):
        return retry.Retryable(0, f"{type(exc).__name__}: {exc}", "ConnectionError")  # no HTTP answer at all
    return retry.map_error(exc)


def delete_headers(reason: str) -> dict[str, str]:
    """Why a delete is asked for and by which process (Airflow's host name of the component, its pid): sent as
    request headers, so the cluster's audit can tell an attempt's end or a teardown from anything else."""
    try:
        from airflow.utils.net import get_hostname

        host = get_hostname()
    except Exception:  # noqa: BLE001 - outside a configured Airflow: the machine's name
        host = socket.getfqdn()
    return {DELETE_REASON_HEADER: reason, DELETE_CALLER_HEADER: f"{host} pid {os.getpid()}"}


# The API server's own sentence names the identity: `<resource> "<name>" is forbidden: User "system:serviceaccount:
# ns:sa" cannot get resource "configmaps" in API group "" in the namespace "ml"` (k8s.io/apiserver
# pkg/endpoints/handlers/responsewriters/errors.go, ForbiddenStatusError).
_USER_RE = re.compile(r'User "(?P<user>[^"]*)" cannot')
# The verb each client method asks the API server for (kubernetes.io "Authorization": request verbs).
_VERBS = (("create_", "create"), ("read_", "get"), ("get_", "get"), ("list_", "list"), ("watch_", "watch"),
          ("replace_", "update"), ("patch_", "patch"), ("delete_", "delete"))


class Forbidden(retry.PermissionDenied, AirflowFailException):
    """403 from the Kubernetes API: the identity may not do this. Never retried, and an AirflowFailException, so
    the task fails at once for good wherever it surfaces (operator, trigger event, hook in a @task).

    The message names the verb, the resource, the namespace, the identity (the API server's `User "..."`) and what
    the provider knows of the connection (`where`).
    """

    def __init__(self, server_message: str, verb: str, resource: str, namespace: str, where: str = "") -> None:
        self.verb, self.resource, self.namespace, self.where = verb, resource, namespace, where
        found = _USER_RE.search(server_message or "")
        self.user = found.group("user") if found else ""
        self.server_message = server_message
        who = f'identity "{self.user}"' if self.user else "this identity"
        via = f" ({where})" if where else ""
        self.permission = ""
        ApiError.__init__(self, 403, f"{who}{via} may not {verb} {resource} in namespace {namespace or '-'}. "
                                     f"The API server said: {server_message}", "Forbidden")

    @property
    def rbac(self) -> bool:
        """RBAC refused the request (an admission webhook's 403 names no user: the spec itself was refused)."""
        return bool(self.user)


def forbidden(exc: BaseException, method: str, namespace: str | None, where: str = "") -> BaseException:
    """A mapped error, made a Forbidden naming verb, resource and namespace when it is a 403."""
    if isinstance(exc, Forbidden) or not isinstance(exc, retry.PermissionDenied):
        return exc
    verb = next((v for prefix, v in _VERBS if method.startswith(prefix)), method)
    if "custom_object" in method:
        resource = f"{PLURAL}.{GROUP}"
    else:  # core/v1: list_namespaced_pod -> pods, read_namespaced_config_map -> configmaps
        resource = method.rsplit("namespaced_", 1)[-1].replace("_", "") + "s"
    message = str(exc).split(": ", 1)[-1]
    return Forbidden(message, verb, resource, namespace or "", where)


def _retrying_types() -> tuple[type[BaseException], ...]:
    # A 401 means the token expired between minting and use: the next attempt opens a fresh client.
    return (retry.Retryable, retry.Unauthorized)


def _async_retrying() -> tenacity.AsyncRetrying:
    """The same policy as adapters.retry (attempts, waits), for coroutines."""
    return tenacity.AsyncRetrying(
        retry=tenacity.retry_if_exception_type(_retrying_types()),
        stop=tenacity.stop_after_attempt(retry.ATTEMPTS),
        wait=tenacity.wait_random_exponential(multiplier=retry.INITIAL_WAIT, max=retry.MAX_WAIT),
        before_sleep=tenacity.before_sleep_log(log, logging.WARNING),
        reraise=True,
    )


class KubernetesJobSetApi:
    """Sync JobSetApi. `client_factory()` returns a kubernetes.client.ApiClient (e.g. GKEKubernetesHook.get_conn)."""

    def __init__(self, client_factory: Callable[[], Any], where: str = "") -> None:
        self.client_factory = client_factory
        self.where = where  # the connection, as a 403 names it ("connection kubernetes_default", ...)

    def _call(self, method: str, core: bool = False, **kwargs: Any) -> Any:
        from kubernetes import client as k8s

        def once() -> Any:
            api_client = self.client_factory()  # a fresh client, so a fresh token, per attempt
            try:
                if core:  # pods and the run lock (a ConfigMap): core/v1
                    return getattr(k8s.CoreV1Api(api_client), method)(**kwargs)
                api = k8s.CustomObjectsApi(api_client)
                return getattr(api, method)(group=GROUP, version=VERSION, plural=PLURAL, **kwargs)
            except Exception as exc:
                mapped = forbidden(to_api_error(exc), method, kwargs.get("namespace"), self.where)
                if mapped is exc:
                    raise
                raise mapped from exc
            finally:
                api_client.close()

        return retry.policy(_retrying_types())(once)()

    def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._call("create_namespaced_custom_object", namespace=namespace, body=body)

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        return self._call("get_namespaced_custom_object", namespace=namespace, name=name)

    def list(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        result = self._call("list_namespaced_custom_object", namespace=namespace, label_selector=label_selector)
        return result.get("items", [])

    def delete(self, namespace: str, name: str, reason: str = DELETE_UNSPECIFIED) -> None:
        # Foreground: the JobSet goes only after its Jobs and pods; checkpoints in the bucket are untouched.
        with contextlib.suppress(NotFound):
            self._call("delete_namespaced_custom_object", namespace=namespace, name=name,
                       propagation_policy="Foreground", _headers=delete_headers(reason))

    def list_pods(self, namespace: str, jobset_name: str) -> list[dict[str, Any]]:
        """The JobSet's pods (label jobset.sigs.k8s.io/jobset-name), as plain dicts."""
        result = self._call("list_namespaced_pod", core=True, namespace=namespace,
                            label_selector=f"{JOBSET_NAME_LABEL}={jobset_name}", _preload_content=False)
        return json.loads(result.data).get("items", [])

    # The run lock: a ConfigMap; create is create-if-absent (409), replace is compare-and-set on resourceVersion.
    def create_lock(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._plain(self._call("create_namespaced_config_map", core=True, namespace=namespace, body=body,
                                      _preload_content=False))

    def get_lock(self, namespace: str, name: str) -> dict[str, Any]:
        return self._plain(self._call("read_namespaced_config_map", core=True, namespace=namespace, name=name,
                                      _preload_content=False))

    def replace_lock(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._plain(self._call("replace_namespaced_config_map", core=True, namespace=namespace, name=name,
                                      body=body, _preload_content=False))

    def delete_lock(self, namespace: str, name: str) -> None:
        with contextlib.suppress(NotFound):
            self._call("delete_namespaced_config_map", core=True, namespace=namespace, name=name,
                       _headers=delete_headers(DELETE_LOCK_RELEASED))

    @staticmethod
    def _plain(response: Any) -> dict[str, Any]:
        return json.loads(response.data) if hasattr(response, "data") else response


class AsyncKubernetesJobSetApi:
    """Async JobSetApi for triggers. `client_factory()` is an async context manager yielding a
    kubernetes_asyncio ApiClient with a fresh token (e.g. GKEKubernetesAsyncHook.get_conn)."""

    def __init__(self, client_factory: Callable[[], AsyncContextManager[Any]], *, poll_interval: float = 30.0,
                 watch_timeout: int = 300, where: str = "") -> None:
        self.client_factory = client_factory
        self.where = where  # the connection, as a 403 names it
        self.poll_interval = poll_interval
        self.watch_timeout = watch_timeout
        self.polling = False  # set when watching kept failing and polling took over

    async def _call(self, method: str, **kwargs: Any) -> Any:
        from kubernetes_asyncio import client as k8s

        async def once() -> Any:
            try:
                async with self.client_factory() as api_client:
                    api = k8s.CustomObjectsApi(api_client)
                    return await getattr(api, method)(group=GROUP, version=VERSION, plural=PLURAL, **kwargs)
            except Exception as exc:
                mapped = forbidden(to_api_error(exc), method, kwargs.get("namespace"), self.where)
                if mapped is exc:
                    raise
                raise mapped from exc

        async for attempt in _async_retrying():
            with attempt:
                return await once()

    async def get(self, namespace: str, name: str) -> dict[str, Any]:
        return await self._call("get_namespaced_custom_object", namespace=namespace, name=name)

    async def delete(self, namespace: str, name: str, reason: str = DELETE_UNSPECIFIED) -> None:
        with contextlib.suppress(NotFound):
            await self._call("delete_namespaced_custom_object", namespace=namespace, name=name,
                             propagation_policy="Foreground", _headers=delete_headers(reason))

    async def list_pods(self, namespace: str, jobset_name: str) -> list[dict[str, Any]]:
        from kubernetes_asyncio import client as k8s

        async for attempt in _async_retrying():
            with attempt:
                try:
                    async with self.client_factory() as api_client:
                        api = k8s.CoreV1Api(api_client)
                        pods = await api.list_namespaced_pod(namespace, label_selector=f"{JOBSET_NAME_LABEL}={jobset_name}")
                        return [api_client.sanitize_for_serialization(p) for p in pods.items]
                except Exception as exc:
                    mapped = forbidden(to_api_error(exc), "list_namespaced_pod", namespace, self.where)
                    if mapped is exc:
                        raise
                    raise mapped from exc

    async def _watch_once(self, namespace: str, name: str, resource_version: str) -> AsyncIterator[WatchEvent]:
        """One watch request from resource_version until the server ends it; errors mapped."""
        from kubernetes_asyncio import client as k8s
        from kubernetes_asyncio import watch

        try:
            async with self.client_factory() as api_client:
                api = k8s.CustomObjectsApi(api_client)
                async with watch.Watch().stream(
                    api.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL,
                    field_selector=f"metadata.name={name}", resource_version=resource_version,
                    timeout_seconds=self.watch_timeout,
                ) as stream:
                    async for event in stream:
                        yield WatchEvent(event["type"], event["raw_object"])
        except Exception as exc:
            mapped = forbidden(to_api_error(exc), "watch_namespaced_custom_object", namespace, self.where)
            if mapped is exc:
                raise
            raise mapped from exc

    async def watch(self, namespace: str, name: str, resource_version: str | None = None) -> AsyncIterator[WatchEvent]:
        """Events for one JobSet until it is deleted (the caller stops reading when it has what it needs)."""
        if resource_version is None:
            obj = await self.get(namespace, name)
            resource_version = obj["metadata"]["resourceVersion"]
            yield WatchEvent("ADDED", obj)
        failures = 0
        while not self.polling:
            try:
                async for event in self._watch_once(namespace, name, resource_version):
                    failures = 0
                    resource_version = event.obj.get("metadata", {}).get("resourceVersion", resource_version)
                    yield event
                    if event.type == "DELETED":
                        return
            except ApiError as exc:
                if exc.status == 410:  # our resourceVersion is too old: relist and resume from now
                    log.info("watch of %s/%s: 410 Gone, relisting", namespace, name)
                    obj = await self.get(namespace, name)
                    resource_version = obj["metadata"]["resourceVersion"]
                    yield WatchEvent("MODIFIED", obj)
                elif isinstance(exc, retry.Unauthorized):  # token expired mid-watch: reconnect, fresh token
                    failures += 1
                    log.info("watch of %s/%s: 401, reconnecting with a fresh token", namespace, name)
                elif isinstance(exc, retry.Retryable):
                    failures += 1
                    await asyncio.sleep(min(retry.MAX_WAIT, retry.INITIAL_WAIT * 2 ** failures))
                else:
                    raise
                if failures >= retry.ATTEMPTS:
                    log.warning("watch of %s/%s keeps failing (%s); polling every %ss instead",
                                namespace, name, exc, self.poll_interval)
                    self.polling = True
        async for event in self._poll(namespace, name, resource_version):
            yield event

    async def _poll(self, namespace: str, name: str, resource_version: str) -> AsyncIterator[WatchEvent]:
        while True:
            try:
                obj = await self.get(namespace, name)
            except NotFound:
                yield WatchEvent("DELETED", {"metadata": {"name": name, "namespace": namespace}})
                return
            if obj["metadata"].get("resourceVersion") != resource_version:
                resource_version = obj["metadata"]["resourceVersion"]
                yield WatchEvent("MODIFIED", obj)
            await asyncio.sleep(self.poll_interval)
