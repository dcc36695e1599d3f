"""JobSetApi / AsyncJobSetApi over the Kubernetes API (custom objects, jobset.x-k8s.io/v1alpha2).

Transport only: requests get their client from a factory (so a client carries a fresh token: GKE tokens expire
during long waits) and errors are mapped through `to_api_error`. The sync api lets one client serve the requests of
`client_reuse_seconds` (a launch's burst: the checkpoint claim, the run lock, the listing, the create), far inside a
token's life; a request that fails drops its client, so the retry (and a 401's) opens a fresh one. Transient answers
(429, 5xx, connection errors) are retried with one bounded exponential backoff policy (tenacity) that
honours Retry-After. Every request has a client-side timeout (`request_timeout`): the GKE hooks' clients
have none, and a half-open connection would otherwise hang the caller for ever.
The watch (https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes)
asks the server to end it after `watch_timeout` s (`timeoutSeconds`) and gives the client longer than that,
so a watch ends normally, which is not a failure: it resumes from the last resourceVersion. It relists on
410 Gone (https://kubernetes.io/docs/reference/using-api/api-concepts/#410-gone-responses), opens a new
client on 401, and, when watching keeps failing, polls for `rewatch_after` s and then watches again.
`answers` counts the requests the API answered (a watch counts when its stream opens), so a caller can tell
an outage from a run of unrelated failures.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import json
import logging
import os
import re
import socket
import threading
import time
from typing import Any, AsyncContextManager, AsyncIterator, Callable

import tenacity
from airflow.sdk.exceptions import AirflowFailException

from mtc_provider.adapters import retry

try:
    from asyncio import timeout as _timeout  # Python 3.11+
except ImportError:  # pragma: no cover - Python 3.10: aiohttp's own dependency there
    from async_timeout import timeout as _timeout
from mtc_provider.adapters.protocols import ApiError, NotFound, WatchEvent
from mtc_provider.core.basics.vocabulary import (DEFAULT_POLL_INTERVAL_S, DELETE_CALLER_HEADER, DELETE_LOCK_RELEASED,
                                                 DELETE_REASON_HEADER, DELETE_UNSPECIFIED, JOBSET, JOBSET_NAME_LABEL)

GROUP, VERSION, PLURAL = JOBSET.group, JOBSET.version, JOBSET.plural
log = logging.getLogger(__name__)

REQUEST_TIMEOUT = 60.0  # seconds for any request but a watch (the cncf.kubernetes clients' own default)
# A sync client (its token, its kept-alive connection) serves requests for this long: a launch's burst shares one
# client instead of minting a token and opening a TLS connection per request. google-auth hands out a token with
# minutes left at least (it refreshes earlier: google.auth.credentials REFRESH_THRESHOLD), so this stays far inside it.
CLIENT_REUSE_SECONDS = 30.0
WATCH_TIMEOUT = 300  # the server-side timeoutSeconds of one watch
WATCH_MARGIN = 30.0  # the client waits this much longer than timeoutSeconds: the server ends a watch, not us
REWATCH_AFTER = 300.0  # seconds of polling (after watching kept failing) before watching again


def to_api_error(exc: BaseException) -> BaseException:
    """Map a kubernetes / kubernetes_asyncio / connection error through the provider's one mapping."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, (OSError, asyncio.TimeoutError)) or type(exc).__module__.split(".")[0] in ("aiohttp", "urllib3"):
        return retry.Retryable(0, f"{type(exc).__name__}: {exc}", "ConnectionError")  # no HTTP answer at all
    return retry.map_error(exc)


def delete_headers(reason: str) -> dict[str, str]:
    """Why a delete is asked for and by whom (the OS user, Airflow's host name of the component, its pid): sent as
    request headers, so the cluster's audit can tell an attempt's end or a teardown from anything else."""
    try:
        from mtc_provider.adapters.airflow_private import hostname

        host = hostname()
    except Exception:  # noqa: BLE001 - outside a configured Airflow: the machine's name
        host = socket.getfqdn()
    return {DELETE_REASON_HEADER: reason, DELETE_CALLER_HEADER: f"{_user()}@{host} pid {os.getpid()}"}


def _user() -> str:
    """The OS user of this process (a person running `mtc delete`, or the Airflow component's account)."""
    try:
        import getpass

        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in this environment (a container with a bare uid)
        return f"uid {os.getuid()}"


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
    if method == OPEN_CLIENT or str(exc).startswith("minting a token was refused"):  # retry.identity_error
        return Forbidden(str(exc), "mint a token to reach", "the Kubernetes API", namespace or "", where)
    if "custom_object" in method:
        resource = f"{PLURAL}.{GROUP}"
    else:  # core/v1: list_namespaced_pod -> pods, read_namespaced_config_map -> configmaps
        resource = method.rsplit("namespaced_", 1)[-1].replace("_", "") + "s"
    message = str(exc).split(": ", 1)[-1]
    return Forbidden(message, verb, resource, namespace or "", where)


OPEN_CLIENT = "open a client"  # mapped_errors' method while a client (and its token) is made


@contextlib.contextmanager
def mapped_errors(method: str, namespace: str | None, where: str = "") -> Any:
    """Within: a client's exception is raised as the provider's one mapping of it (to_api_error; a 403 as a
    Forbidden naming verb, resource, namespace and `where`); an exception that maps to itself keeps its traceback.
    The sync and the async api's every request, the pod listing and the watch."""
    try:
        yield
    except Exception as exc:
        mapped = forbidden(to_api_error(exc), method, namespace, where)
        if mapped is exc:
            raise
        raise mapped from exc


def _retrying_types() -> tuple[type[BaseException], ...]:
    # A 401 means the token expired between minting and use: the next attempt opens a fresh client.
    return (retry.Retryable, retry.Unauthorized)


def _async_retrying() -> tenacity.AsyncRetrying:
    """The same policy as adapters.retry (attempts, waits, Retry-After), for coroutines."""
    return tenacity.AsyncRetrying(
        retry=tenacity.retry_if_exception_type(_retrying_types()),
        stop=tenacity.stop_after_attempt(retry.ATTEMPTS),
        wait=retry.wait_honouring_retry_after(retry.INITIAL_WAIT, retry.MAX_WAIT),
        before_sleep=tenacity.before_sleep_log(log, logging.DEBUG),  # OutageClock logs outages
        reraise=True,
    )


class KubernetesJobSetApi:
    """Sync JobSetApi. `client_factory()` returns a kubernetes.client.ApiClient (e.g. GKEKubernetesHook.get_conn).

    :param request_timeout: client-side seconds per request (GKEKubernetesHook's client has no timeout of its own).
    :param outage_timeout: seconds an unreachable API (429, 5xx, no answer) is waited out, beyond the short
        bounded retries, before ApiUnreachable; 0: no outage wait (the hook and the CLI).
    :param outage_log_interval: seconds between "Kubernetes API unreachable" lines during an outage.
    :param outage_max_backoff: the longest wait between tries during an outage (a Retry-After may ask longer).
    :param client_reuse_seconds: how long one client serves requests (0: a client per request); a request with
        extra headers (a delete's reason) always gets its own.
    """

    def __init__(self, client_factory: Callable[[], Any], *, request_timeout: float = REQUEST_TIMEOUT,
                 outage_timeout: float = 0.0, outage_log_interval: float = 180.0,
                 outage_max_backoff: float = 60.0, sleep: Callable[[float], None] = time.sleep,
                 where: str = "", client_reuse_seconds: float = CLIENT_REUSE_SECONDS) -> None:
        self.client_factory = client_factory
        self.where = where  # the connection, as a 403 names it ("connection kubernetes_default", ...)
        self.request_timeout = request_timeout
        self.outage_timeout = outage_timeout
        self.outage_log_interval = outage_log_interval
        self.outage_max_backoff = outage_max_backoff
        self.sleep = sleep
        self.answers = 0
        self.client_reuse_seconds = client_reuse_seconds
        self.clients_opened = 0  # clients (so tokens) made: what a benchmark reports beside the requests
        # [(client, monotonic time it was opened) or None]: one cell, so the twins `waiting_out` makes share it
        self._kept: list[tuple[Any, float] | None] = [None]
        self._shared_lock = threading.Lock()

    def waiting_out(self, outage_timeout: float) -> KubernetesJobSetApi:
        """This api waiting an unreachable API out `outage_timeout` s instead, over the same shared client (its
        token, its kept-alive connection): one caller's steps with different outage bounds open one client."""
        twin = copy.copy(self)
        twin.outage_timeout = float(outage_timeout)
        return twin

    def _open(self) -> Any:
        api_client = self.client_factory()
        self.clients_opened += 1
        pool = getattr(getattr(api_client, "rest_client", None), "pool_manager", None)
        if pool is not None:  # urllib3's own retries (3 by default) off: this policy alone decides
            pool.connection_pool_kw["retries"] = False
        return api_client

    def _client(self, shared: bool) -> Any:
        """The shared client while it is younger than client_reuse_seconds, else a fresh one (kept when shared)."""
        if not shared:
            return self._open()
        with self._shared_lock:
            if self._kept[0] is not None and time.monotonic() - self._kept[0][1] < self.client_reuse_seconds:
                return self._kept[0][0]
            self._drop(self._kept[0] and self._kept[0][0])
            api_client = self._open()
            self._kept[0] = (api_client, time.monotonic())
            return api_client

    def _drop(self, api_client: Any) -> None:
        """Close `api_client`; it is no longer shared (its token may be the one refused, its server gone)."""
        if api_client is None:
            return
        if self._kept[0] is not None and self._kept[0][0] is api_client:
            self._kept[0] = None
        with contextlib.suppress(Exception):
            api_client.close()

    def _call(self, method: str, core: bool = False, headers: dict[str, str] | None = None, **kwargs: Any) -> Any:
        from kubernetes import client as k8s

        shared = self.client_reuse_seconds > 0 and not headers

        def once() -> Any:
            with mapped_errors(OPEN_CLIENT, kwargs.get("namespace"), self.where):  # minting a token may fail
                api_client = self._client(shared)
            for header, value in (headers or {}).items():  # per client: every client version has this (no _headers)
                api_client.set_default_header(header, value)
            # (connect, read): kubernetes 32's REST client ignores a float (it takes an int or a tuple)
            timeout = (self.request_timeout, self.request_timeout)
            try:
                with mapped_errors(method, kwargs.get("namespace"), self.where):
                    if core:  # pods and the run lock (a ConfigMap): core/v1
                        result = getattr(k8s.CoreV1Api(api_client), method)(**kwargs, _request_timeout=timeout)
                    else:
                        api = k8s.CustomObjectsApi(api_client)
                        result = getattr(api, method)(group=GROUP, version=VERSION, plural=PLURAL, **kwargs,
                                                      _request_timeout=timeout)
                self.answers += 1
                return result
            except Exception as exc:
                # no answer, a 5xx, an expired token: the retry opens a fresh client (an answer, 404 or 409, keeps it)
                if shared and (not isinstance(exc, ApiError) or isinstance(exc, (retry.Retryable, retry.Unauthorized))):
                    with self._shared_lock:
                        self._drop(api_client)
                raise
            finally:
                if not shared:
                    api_client.close()

        return self._through_outage(retry.policy(_retrying_types())(once), method)

    def _through_outage(self, call: Callable[[], Any], what: str) -> Any:
        """`call()`, and while the API stays unreachable keep calling, bounded by outage_timeout."""
        from mtc_provider.core.attempt.outage import OutageClock

        outage = OutageClock(self.outage_timeout, self.outage_max_backoff, self.outage_log_interval)
        while True:
            began = time.monotonic()  # the outage starts with its first failing call, not after its inner retries
            try:
                result = call()
            except retry.Retryable as exc:
                now = time.monotonic()
                delay = outage.failed(now, retry.describe_failure(exc), retry.retry_after_of(exc), started=began)
                if outage.exhausted(now) or self.outage_timeout <= 0:
                    if self.outage_timeout <= 0:
                        raise
                    raise retry.ApiUnreachable("the Kubernetes API", outage.elapsed(now), outage.last_status,
                                               self.outage_timeout) from exc
                if outage.should_log(now):
                    log.warning("Kubernetes API unreachable for %.0f s (%s) on %s; still trying, for at most %.0f s "
                                "more", outage.elapsed(now), outage.last_status, what, outage.remaining(now))
                self.sleep(delay)
                continue
            if outage.ongoing:
                log.info("Kubernetes API answers again after %.0f s", outage.reset(time.monotonic()))
            return result

    def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        # Strict field validation: an API server refuses (400) a field the served CRD would prune silently -- the
        # failure policy's message patterns on a JobSet older than v0.10 -- instead of running without it
        # (Kubernetes "API Concepts": Field validation, fieldValidation=Strict).
        return self._call("create_namespaced_custom_object", namespace=namespace, body=body, field_validation="Strict")

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        return self._call("get_namespaced_custom_object", namespace=namespace, name=name)

    def list(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        result = self._call("list_namespaced_custom_object", namespace=namespace, label_selector=label_selector)
        return result.get("items", [])

    def delete(self, namespace: str, name: str, reason: str = DELETE_UNSPECIFIED) -> None:
        # Foreground: the JobSet goes only after its Jobs and pods; checkpoints in the bucket are untouched.
        with contextlib.suppress(NotFound):
            self._call("delete_namespaced_custom_object", namespace=namespace, name=name,
                       propagation_policy="Foreground", headers=delete_headers(reason))

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
                       headers=delete_headers(DELETE_LOCK_RELEASED))

    @staticmethod
    def _plain(response: Any) -> dict[str, Any]:
        return json.loads(response.data) if hasattr(response, "data") else response


ASYNC_CLIENT_MODULES = ("aiohttp", "kubernetes_asyncio.client", "kubernetes_asyncio.watch", "kubernetes_asyncio.config")


def import_clients() -> None:
    """Import the async clients (about 1000 modules: seconds cold, 12 s at load 9). The requests import them
    lazily on the triggerer's event loop, where a cold import holds every trigger of the process; a trigger
    builds its api in a thread, so this runs there once and the requests find them loaded."""
    import importlib

    for name in ASYNC_CLIENT_MODULES:
        importlib.import_module(name)


class AsyncKubernetesJobSetApi:
    """Async JobSetApi for triggers. `client_factory()` is an async context manager yielding a
    kubernetes_asyncio ApiClient with a fresh token (e.g. GKEKubernetesAsyncHook.get_conn).

    :param request_timeout: client-side seconds per request and for opening a client (minting its token);
        a watch gets `watch_timeout + WATCH_MARGIN`.
    :param watch_timeout: the server-side timeoutSeconds of one watch; the watch then ends normally.
    :param rewatch_after: seconds of polling, after watching kept failing, before watching again.
    """

    def __init__(self, client_factory: Callable[[], AsyncContextManager[Any]], *, poll_interval: float = DEFAULT_POLL_INTERVAL_S,
                 watch_timeout: int = WATCH_TIMEOUT, request_timeout: float = REQUEST_TIMEOUT,
                 rewatch_after: float = REWATCH_AFTER, where: str = "") -> None:
        self.client_factory = client_factory
        self.where = where  # the connection, as a 403 names it
        self.poll_interval = poll_interval
        self.watch_timeout = watch_timeout
        self.request_timeout = request_timeout
        self.rewatch_after = rewatch_after
        self.polling = False  # set while watching kept failing and polling stands in
        self.answers = 0
        import_clients()  # here, where a trigger builds its api in a thread, not at its first request on the loop
        # time.time() of the first transient failure since the API last answered (None while it answers): an
        # outage is timed from there, not from when the bounded retries here gave up (a minute later)
        self.failing_since: float | None = None

    def _answered(self) -> None:
        self.answers += 1
        self.failing_since = None

    @contextlib.contextmanager
    def _observed(self):
        """Notes a transient failure (429, 5xx, no answer) of a request; any other answer (404...) is an answer."""
        try:
            yield
        except retry.Retryable:
            if self.failing_since is None:
                self.failing_since = time.time()
            raise

    @contextlib.asynccontextmanager
    async def _client(self) -> AsyncIterator[Any]:
        """A client, opened within request_timeout (opening may mint a token or read a kubeconfig)."""
        async with contextlib.AsyncExitStack() as stack:
            async with _timeout(self.request_timeout):
                api_client = await stack.enter_async_context(self.client_factory())
            yield api_client

    async def _call(self, method: str, headers: dict[str, str] | None = None, **kwargs: Any) -> Any:
        from kubernetes_asyncio import client as k8s

        async def once() -> Any:
            with mapped_errors(method, kwargs.get("namespace"), self.where):
                async with self._client() as api_client:
                    for header, value in (headers or {}).items():  # per client, as in the sync api
                        api_client.set_default_header(header, value)
                    api = k8s.CustomObjectsApi(api_client)
                    result = await getattr(api, method)(group=GROUP, version=VERSION, plural=PLURAL, **kwargs,
                                                        _request_timeout=self.request_timeout)
                    self._answered()
                    return result

        async for attempt in _async_retrying():
            with attempt, self._observed():
                return await once()

    async def get(self, namespace: str, name: str) -> dict[str, Any]:
        return await self._call("get_namespaced_custom_object", namespace=namespace, name=name)

    async def delete(self, namespace: str, name: str, reason: str = DELETE_UNSPECIFIED) -> None:
        with contextlib.suppress(NotFound):
            await self._call("delete_namespaced_custom_object", namespace=namespace, name=name,
                             propagation_policy="Foreground", headers=delete_headers(reason))

    async def list_pods(self, namespace: str, jobset_name: str) -> list[dict[str, Any]]:
        from kubernetes_asyncio import client as k8s

        async for attempt in _async_retrying():
            with attempt, self._observed(), mapped_errors("list_namespaced_pod", namespace, self.where):
                async with self._client() as api_client:
                    api = k8s.CoreV1Api(api_client)
                    pods = await api.list_namespaced_pod(namespace, label_selector=f"{JOBSET_NAME_LABEL}={jobset_name}",
                                                         _request_timeout=self.request_timeout)
                    self._answered()
                    return [api_client.sanitize_for_serialization(p) for p in pods.items]

    async def list_pod_events(self, namespace: str) -> list[dict[str, Any]]:
        """The Warning events about pods in `namespace` (core/v1 events, fieldSelector involvedObject.kind=Pod and
        type=Warning: https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/event-v1/), as plain
        dicts; the caller keeps those of its own pods (core.attempt.pod_events)."""
        from kubernetes_asyncio import client as k8s

        async for attempt in _async_retrying():
            with attempt, self._observed(), mapped_errors("list_namespaced_event", namespace, self.where):
                async with self._client() as api_client:
                    api = k8s.CoreV1Api(api_client)
                    found = await api.list_namespaced_event(namespace, field_selector="involvedObject.kind=Pod,"
                                                            "type=Warning", _request_timeout=self.request_timeout)
                    self._answered()
                    return [api_client.sanitize_for_serialization(e) for e in found.items]

    def _counting(self, list_fn: Callable[..., Any]) -> Callable[..., Any]:
        """The watch's request: counts an opened stream as an answer; a non-2xx answer raises with its headers
        (kubernetes_asyncio reads a streamed error body as an event and loses Retry-After)."""
        from kubernetes_asyncio.client import ApiException
        from kubernetes_asyncio.client.rest import RESTResponse

        @functools.wraps(list_fn)  # keeps the docstring the Watch reads the return type from
        async def connect(*args: Any, **kwargs: Any) -> Any:
            response = await list_fn(*args, **kwargs)
            if not 200 <= response.status <= 299:
                data = await response.read()
                response.release()
                raise ApiException(http_resp=RESTResponse(response, data))
            self._answered()
            return response

        return connect

    async def _watch_once(self, namespace: str, name: str, resource_version: str) -> AsyncIterator[WatchEvent]:
        """One watch request from resource_version until the server ends it; errors mapped."""
        import aiohttp
        from kubernetes_asyncio import client as k8s
        from kubernetes_asyncio import watch

        # The client must outlast the server's timeoutSeconds, or every quiet watch ends as a client timeout
        # (the cncf.kubernetes client's default is 60 s whatever timeoutSeconds says).
        client_timeout = aiohttp.ClientTimeout(total=self.watch_timeout + WATCH_MARGIN, connect=self.request_timeout)
        with mapped_errors("watch_namespaced_custom_object", namespace, self.where):
            async with self._client() as api_client:
                api = k8s.CustomObjectsApi(api_client)
                async with watch.Watch().stream(self._counting(api.list_namespaced_custom_object), GROUP, VERSION,
                                                namespace, PLURAL, field_selector=f"metadata.name={name}",
                                                resource_version=resource_version, timeout_seconds=self.watch_timeout,
                                                _request_timeout=client_timeout) as stream:
                    async for event in stream:
                        yield WatchEvent(event["type"], event["raw_object"])

    async def watch(self, namespace: str, name: str, resource_version: str | None = None) -> AsyncIterator[WatchEvent]:
        """Events for one JobSet until it is deleted (the caller stops reading when it has what it needs).

        When watching keeps failing, polling stands in for `rewatch_after` s; a poll that still fails after the
        bounded retries raises (the API is unreachable, not just its watch): the caller decides how long to wait
        an outage out, and calls watch again with the last resourceVersion.
        """
        if resource_version is None:
            try:
                obj = await self.get(namespace, name)
            except NotFound:  # nothing to watch: gone already, as the polling fallback says it
                yield WatchEvent("DELETED", {"metadata": {"name": name, "namespace": namespace}})
                return
            resource_version = obj["metadata"]["resourceVersion"]
            yield WatchEvent("ADDED", obj)
        failures = 0
        while True:
            if self.polling:
                deadline = time.monotonic() + self.rewatch_after
                while time.monotonic() < deadline:
                    try:
                        obj = await self.get(namespace, name)
                    except NotFound:
                        yield WatchEvent("DELETED", {"metadata": {"name": name, "namespace": namespace}})
                        return
                    if obj["metadata"].get("resourceVersion") != resource_version:
                        resource_version = obj["metadata"]["resourceVersion"]
                        yield WatchEvent("MODIFIED", obj)
                    await asyncio.sleep(self.poll_interval)
                log.info("watch of %s/%s: polled for %.0fs, watching again", namespace, name, self.rewatch_after)
                self.polling, failures = False, 0
            try:
                async for event in self._watch_once(namespace, name, resource_version):
                    failures = 0
                    resource_version = event.obj.get("metadata", {}).get("resourceVersion", resource_version)
                    yield event
                    if event.type == "DELETED":
                        return
                failures = 0  # the server ended the watch after timeoutSeconds: normal, watch on
            except ApiError as exc:
                if exc.status == 410:  # our resourceVersion is too old: relist and resume from now
                    log.info("watch of %s/%s: 410 Gone, relisting", namespace, name)
                    try:
                        obj = await self.get(namespace, name)
                    except NotFound:  # deleted meanwhile, its DELETED event compacted away with our version
                        yield WatchEvent("DELETED", {"metadata": {"name": name, "namespace": namespace}})
                        return
                    resource_version = obj["metadata"]["resourceVersion"]
                    yield WatchEvent("MODIFIED", obj)
                elif isinstance(exc, retry.Unauthorized):  # token expired mid-watch: reconnect, fresh token
                    failures += 1
                    log.info("watch of %s/%s: 401, reconnecting with a fresh token", namespace, name)
                elif isinstance(exc, retry.Retryable):
                    failures += 1
                    self.failing_since = self.failing_since or time.time()
                    await asyncio.sleep(max(min(retry.MAX_WAIT, retry.INITIAL_WAIT * 2 ** failures),
                                            min(retry.retry_after_of(exc) or 0.0, retry.MAX_WAIT)))
                else:
                    raise
                if failures >= retry.ATTEMPTS:
                    log.warning("watch of %s/%s keeps failing (%s); polling every %ss for %.0fs, then watching "
                                "again", namespace, name, exc, self.poll_interval, self.rewatch_after)
                    self.polling = True


def read_jobset_crd(api_client: Any) -> tuple[dict[str, Any] | None, str]:
    """(the JobSet CRD as served, or None when it is not installed; why it could not be read, or ""), through
    `GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions/jobsets.jobset.x-k8s.io`."""
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException

    from mtc_provider.core.definition.render.jobset_crd import CRD_NAME

    try:
        response = k8s.ApiextensionsV1Api(api_client).read_custom_resource_definition(
            CRD_NAME, _preload_content=False, _request_timeout=(REQUEST_TIMEOUT, REQUEST_TIMEOUT))
    except ApiException as exc:
        if exc.status == 404:
            return None, ""
        if exc.status in (401, 403):
            return None, f"{exc.status} {exc.reason}"
        raise ApiError(exc.status or 0, str(exc.body or exc.reason), exc.reason or "") from exc
    return json.loads(response.data), ""
