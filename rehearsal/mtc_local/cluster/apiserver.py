"""The local Kubernetes API server: the subset of the API the provider and `kubectl` use, over HTTP on 127.0.0.1.

Hosted by the runner's supervisor, which is the JobSet controller and kubelet behind it (`Controller`): creating a
JobSet starts its pods, deleting it terminates them. Everything else is the store's (store.py).

Served (https://kubernetes.io/docs/reference/using-api/api-concepts/ for the verbs and their answers):
- discovery: /version, /api, /apis, /api/v1, /apis/<group>, /apis/<group>/<version> (resources.py);
- customresourcedefinitions.apiextensions.k8s.io/v1: get of the CRDs it serves (schemas.py), as installed;
- namespaces (create, get, list, watch); a namespaced create in a missing namespace is 404 NotFound;
- jobsets.jobset.x-k8s.io/v1alpha2: create (validated against the CRD: 422 Invalid), get, list and watch with
  labelSelector / fieldSelector / resourceVersion / allowWatchBookmarks, patch and the status subresource (get,
  patch), delete with propagationPolicy Foreground (the object stays, with deletionTimestamp and the
  foregroundDeletion finalizer, until its pods are gone), Background (the object goes at once, its pods are
  removed after) or Orphan (the object goes at once, its pods stay and keep running)
  (https://kubernetes.io/docs/concepts/architecture/garbage-collection/#cascading-deletion);
- pods: get, list, watch, log (tailLines, limitBytes, sinceSeconds, timestamps, follow), delete (graceful:
  deletionTimestamp, SIGTERM, SIGKILL after the grace period, then the Job's and the JobSet's failure handling;
  https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination);
- configmaps: create (409 AlreadyExists), get, list, watch, replace (409 Conflict on a stale resourceVersion),
  patch, delete;
- checkpointconfigurations.checkpointing.gke.io/v1 (cluster-scoped): create, get, list, watch, replace, patch, delete;
- selfsubjectaccessreviews.authorization.k8s.io/v1: create (the answer is not stored).
PATCH (patches.py, updates.py): merge and JSON patch everywhere, strategic merge patch on ConfigMaps (415 for custom
resources, as for CRDs); the result is validated as a create is (422), a stale metadata.resourceVersion in the
patch is 409 Conflict, a patch that changes nothing writes nothing, any other bumps resourceVersion (a MODIFIED
watch event).
Every DELETE is appended to `delete_audit` (JSON lines: time, path, code, caller, reason, agent), from the headers
the provider sends with each delete (core.basics.vocabulary DELETE_CALLER_HEADER / DELETE_REASON_HEADER), as the
Kubernetes audit log records a request's user agent (https://kubernetes.io/docs/tasks/debug/debug-cluster/audit/).
An outage switch (faults.py: 503 with Retry-After, dropped or hanging connections, cut watches) rehearses a
control-plane outage; `POST /mtc/faults` sets it from another process.
Authentication: `Authorization: Bearer <token>` (https://kubernetes.io/docs/reference/access-authn-authz/authentication/
#static-token-file); anything else is 401 Unauthorized. The token's user may do everything but what
`<home>/access-denied.json` takes away: 403 Forbidden (access.py). Errors are `Status` bodies (errors.py).
"""

from __future__ import annotations

import copy
import hmac
import json
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Protocol
from urllib.parse import parse_qs, urlparse

from mtc_provider import __version__
from mtc_local.cluster import errors, faults, patches, resources, schemas, tables, updates
from mtc_local.cluster.access import Access
from mtc_local.cluster.errors import StatusError
from mtc_local.cluster.pods import follow_log, read_log
from mtc_local.cluster.resources import CONFIGMAPS, JOBSETS, NAMESPACES, PODS, Resource
from mtc_local.cluster.selectors import SelectorError
from mtc_local.cluster.store import Store
from mtc_provider.core.basics.vocabulary import DELETE_CALLER_HEADER, DELETE_REASON_HEADER
from mtc_local.runner.pods import Pod
from mtc_local.shared.state import append_jsonl

DEFAULT_WATCH_SECONDS = 1800.0  # the API server's --min-request-timeout
BOOKMARK_SECONDS = 10.0
PROPAGATION = ("Foreground", "Background", "Orphan")
PATCHABLE = (JOBSETS, CONFIGMAPS, resources.CHECKPOINT_CONFIGURATIONS)
PATCH_RETRIES = 5  # a patch without a resourceVersion is retried on a concurrent write, as GuaranteedUpdate does
K8S_VERSION = {"major": "1", "minor": "32", "gitVersion": f"v1.32.0-mtc-local+{__version__}",
               "platform": "linux/amd64", "goVersion": "", "compiler": "", "gitCommit": "", "gitTreeState": "",
               "buildDate": "1970-01-01T00:00:00Z"}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up mid-handshake or mid-answer is routine, not a traceback in the supervisor log."""


class Controller(Protocol):
    """What sits behind the JobSet resource: the runner."""

    def create_jobset(self, namespace: str, obj: dict[str, Any]) -> dict[str, Any]: ...

    def delete_jobset(self, namespace: str, name: str, propagation: str) -> dict[str, Any] | None:
        """The object while it is deleted in the foreground, None once it is gone."""

    def update_jobset(self, namespace: str, name: str, change: Callable[[dict[str, Any]], dict[str, Any]],
                      dry_run: bool = False) -> dict[str, Any]:
        """Apply `change` (current object -> new object, or a StatusError) atomically; the object as stored."""

    def delete_pod(self, namespace: str, name: str, grace_seconds: float | None) -> dict[str, Any] | None:
        """The pod while it terminates, None once it is gone."""

    def pod(self, namespace: str, name: str) -> Pod | None: ...


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


def _grace_seconds(options: dict[str, Any], query: dict[str, str]) -> float | None:
    """DeleteOptions.gracePeriodSeconds (body or query): None for the pod's own terminationGracePeriodSeconds."""
    value = options.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
    if value is None:
        return None
    try:
        seconds = int(value)
    except (TypeError, ValueError):
        seconds = -1
    if seconds < 0 or isinstance(value, bool):
        raise errors.bad_request(f"gracePeriodSeconds: Invalid value: {value!r}: must be an integer >= 0")
    return float(seconds)


def _verb(method: str, route: "Route", query: dict[str, str]) -> str:
    """The request's authorization verb (https://kubernetes.io/docs/reference/access-authn-authz/authorization/
    #determine-the-request-verb)."""
    if method == "GET":
        if route.name is not None:
            return "get"
        return "watch" if _truthy(query.get("watch")) else "list"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, method.lower())


class Route:
    """A request path parsed into resource, namespace, name and subresource."""

    def __init__(self, resource: Resource, namespace: str | None, name: str | None, sub: str | None) -> None:
        self.resource, self.namespace, self.name, self.sub = resource, namespace, name, sub


def parse_path(path: str) -> dict[str, Any] | Route | None:
    """A discovery document, a Route, or None (404)."""
    parts = [p for p in path.split("/") if p]
    if parts in (["version"], ["version", ""]):
        return K8S_VERSION
    if parts == ["openapi", "v3"]:
        return resources.openapi_v3_root()
    if parts[:2] == ["openapi", "v3"]:
        return resources.openapi_v3_document("/".join(parts[2:]))
    if parts == ["api"]:
        return resources.api_versions()
    if parts == ["apis"]:
        return resources.api_group_list()
    if parts == ["api", "v1"]:
        return resources.resource_list("", "v1")
    if len(parts) == 2 and parts[0] == "apis":
        group = next((g for g in resources.api_group_list()["groups"] if g["name"] == parts[1]), None)
        return {"kind": "APIGroup", "apiVersion": "v1", **group} if group else None
    if len(parts) == 3 and parts[0] == "apis":
        return resources.resource_list(parts[1], parts[2])
    if len(parts) == 5 and parts[:4] == ["apis", "apiextensions.k8s.io", "v1", "customresourcedefinitions"]:
        return schemas.served_crd(parts[4])  # read-only: what readiness reads (the JobSet version it serves)
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    resource = resources.find(group, version, rest[0]) if rest else None
    if resource is None or len(rest) > 3:
        return None
    if namespace is not None and not resource.namespaced:
        return None
    return Route(resource, namespace, rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None)


class ApiServer:
    def __init__(self, store: Store, controller: Controller, token: bytes, host: str = "127.0.0.1",
                 port: int = 0, tls: ssl.SSLContext | None = None, access: Access | None = None,
                 delete_audit: Path | None = None) -> None:
        self.store, self.controller, self.token = store, controller, token
        self.access = access or Access(None)
        self.delete_audit = delete_audit
        self._audit_lock = threading.Lock()
        try:
            self.httpd = _Server((host, port), self._handler())
        except OSError:
            if not port:
                raise
            self.httpd = _Server((host, 0), self._handler())  # the old port is taken: any port
        if tls is not None:
            # The handshake happens in the request's thread: a slow client never holds up accept().
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True, do_handshake_on_connect=False)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="apiserver", daemon=True)
        self.stopping = threading.Event()
        self.faults = faults.Faults()  # the outage switch (faults.py)

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    def start(self) -> ApiServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    # ---- verbs -----------------------------------------------------------------------------------
    def _namespace_exists(self, namespace: str) -> None:
        self.store.get(NAMESPACES, "", namespace)  # 404 `namespaces "x" not found`

    def create(self, route: Route, body: Any, query: dict[str, str]) -> tuple[int, dict[str, Any]]:
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a JSON object")
        resource, namespace = route.resource, route.namespace or ""
        if resource is resources.SELF_SUBJECT_ACCESS_REVIEWS:
            return 201, self.access.review(body)
        expected = resource.api_version
        if body.get("apiVersion") not in (None, expected) or body.get("kind") not in (None, resource.kind):
            raise errors.bad_request(f"the API version in the data ({body.get('apiVersion')}) does not match the "
                                     f"expected API version ({expected})")
        if resource.namespaced:
            self._namespace_exists(namespace)
            body_ns = (body.get("metadata") or {}).get("namespace")
            if body_ns and body_ns != namespace:
                raise errors.bad_request("the namespace of the provided object does not match the namespace sent on "
                                         "the request")
        schemas.validate(resource, body, strict=query.get("fieldValidation") == "Strict")
        obj = schemas.prune(resource, body)
        obj.pop("status", None)  # the status subresource is the controller's
        if query.get("dryRun") == "All":
            return 201, obj
        if resource is JOBSETS:
            return 201, self.controller.create_jobset(namespace, obj)
        if resource is PODS:
            raise errors.method_not_allowed("pods are created by the JobSet controller of the local cluster")
        return 201, self.store.create(resource, namespace, obj)

    def replace(self, route: Route, body: Any, query: dict[str, str]) -> tuple[int, dict[str, Any]]:
        if route.resource not in (CONFIGMAPS, resources.CHECKPOINT_CONFIGURATIONS) or route.sub:
            raise errors.method_not_allowed()
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a JSON object")
        if (body.get("metadata") or {}).get("name") != route.name:
            raise errors.bad_request("the name of the object does not match the name on the URL")
        schemas.validate(route.resource, body, strict=query.get("fieldValidation") == "Strict")
        return 200, self.store.replace(route.resource, route.namespace or "", route.name,
                                       schemas.prune(route.resource, body))

    def _precondition(self, media: str, current: dict[str, Any], body: Any) -> str | None:
        """The metadata.resourceVersion the patch itself demands (None: the patch does not name one)."""
        bare = copy.deepcopy(current)
        bare["metadata"].pop("resourceVersion", None)
        try:
            meta = patches.apply(media, bare, body).get("metadata")
        except StatusError:
            return None  # the patch fails anyway, with its own error
        return meta.get("resourceVersion") if isinstance(meta, dict) else None

    def patch(self, route: Route, body: Any, content_type: str | None,
              query: dict[str, str]) -> tuple[int, dict[str, Any]]:
        resource, namespace, name = route.resource, route.namespace or "", route.name
        if resource not in PATCHABLE or route.sub not in (None, "status") or (route.sub and resource is not JOBSETS):
            raise errors.method_not_allowed()
        media = patches.media_type(content_type)
        # Strategic merge patch needs a built-in type's Go struct tags: custom resources refuse it.
        patches.check_type(media, patches.BUILTIN_TYPES if not resource.group else patches.CUSTOM_TYPES)
        strict, dry_run = query.get("fieldValidation") == "Strict", query.get("dryRun") == "All"

        def change(current: dict[str, Any]) -> dict[str, Any]:
            wanted = self._precondition(media, current, body)
            if wanted and wanted != current["metadata"].get("resourceVersion"):
                raise errors.conflict(resource, name)
            new = updates.keep_identity(resource, current, patches.apply(media, current, body))
            # The status subresource changes status only, the main resource all else (https://kubernetes.io/docs/
            # tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#status-subresource).
            if resource is JOBSETS:
                if route.sub == "status":
                    new = {**copy.deepcopy(current), "status": new.get("status") or {}}
                elif "status" in current:
                    new["status"] = copy.deepcopy(current["status"])
            schemas.validate(resource, new, strict=strict)
            new = schemas.prune(resource, new)
            if resource is JOBSETS and route.sub is None:
                updates.check_jobset_update(current, new)
            return new

        if resource is JOBSETS:
            return 200, self.controller.update_jobset(namespace, name, change, dry_run)
        for _ in range(PATCH_RETRIES):
            current = self.store.get(resource, namespace, name)
            new = change(current)
            if dry_run or new == current:  # nothing changes: nothing is written (no new resourceVersion)
                return 200, new
            try:
                return 200, self.store.replace(resource, namespace, name, new)
            except StatusError as err:
                if err.reason != "Conflict" or self._precondition(media, current, body):
                    raise
        raise errors.conflict(resource, name)

    def delete(self, route: Route, body: Any, query: dict[str, str]) -> tuple[int, dict[str, Any]]:
        resource, namespace, name = route.resource, route.namespace or "", route.name
        options = body if isinstance(body, dict) else {}
        policy = options.get("propagationPolicy") or query.get("propagationPolicy")
        if policy is None and (options.get("orphanDependents") is True or _truthy(query.get("orphanDependents"))):
            policy = "Orphan"  # the deprecated DeleteOptions field
        policy = policy or "Background"
        if policy not in PROPAGATION:
            raise errors.bad_request(f'propagationPolicy: Unsupported value: "{policy}": supported values: '
                                     '"Foreground", "Background", "Orphan"')
        current = self.store.get(resource, namespace, name)
        if resource is JOBSETS:
            remaining = self.controller.delete_jobset(namespace, name, policy)
            if remaining is not None:
                return 200, remaining
        elif resource is PODS:
            remaining = self.controller.delete_pod(namespace, name, _grace_seconds(options, query))
            if remaining is not None:
                return 200, remaining  # a graceful delete answers the terminating pod
        elif resource is NAMESPACES:
            raise errors.method_not_allowed()
        else:
            self.store.remove(resource, namespace, name)
        details = {"name": name, "kind": resource.plural, "uid": current["metadata"].get("uid")}
        if resource.group:
            details["group"] = resource.group
        return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}

    def audit_delete(self, path: str, headers: Mapping[str, str], code: int) -> None:
        """One line per DELETE, answered or refused: who asked (caller header, else the user agent) and why."""
        if self.delete_audit is None:
            return
        agent = headers.get("User-Agent") or ""
        record = {"time": time.time(), "path": path, "code": code, "caller": headers.get(DELETE_CALLER_HEADER) or agent,
                  "reason": headers.get(DELETE_REASON_HEADER) or "", "agent": agent}
        with self._audit_lock:
            append_jsonl(self.delete_audit, record)

    def pod_log(self, route: Route, query: dict[str, str]) -> tuple[bytes, Iterator[bytes] | None]:
        namespace = route.namespace or ""
        obj = self.store.get(PODS, namespace, route.name)
        containers = [c.get("name") for c in obj.get("spec", {}).get("containers") or []]
        container = query.get("container")
        if container and container not in containers:
            raise errors.bad_request(f"container {container} is not valid for pod {route.name}")
        pod = self.controller.pod(namespace, route.name)
        if pod is None:
            raise errors.not_found(PODS, route.name)

        def number(key: str) -> int | None:
            value = query.get(key)
            if value is None:
                return None
            try:
                return int(value)
            except ValueError:
                raise errors.bad_request(f"{key}: Invalid value: {value!r}: must be an integer") from None

        timestamps = _truthy(query.get("timestamps"))
        text, offset = read_log(pod, number("tailLines"), number("limitBytes"), number("sinceSeconds"), timestamps)
        if not _truthy(query.get("follow")):
            return text, None
        return text, follow_log(pod, offset, timestamps, self.stopping.is_set)

    # ---- HTTP ------------------------------------------------------------------------------------
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            server_version = "mtc-local-apiserver"
            # TCP_NODELAY on every connection, as kube-apiserver has it (Go's net.TCPConn.SetNoDelay: "The default is
            # true (no delay)"): an answer goes out as two writes (the headers, then the body), and with Nagle's
            # algorithm the body waits for the client's delayed ACK of the headers, about 40 ms on Linux, per request.
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:  # the supervisor log stays readable
                pass

            def _send(self, code: int, body: dict[str, Any] | bytes, content_type: str = "application/json") -> None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _chunk(self, data: bytes) -> None:
                if data:
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()

            def _stream(self, content_type: str, first: bytes, rest: Iterator[bytes]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    self._chunk(first)
                    for data in rest:
                        self._chunk(data)
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except OSError:  # the client went away (kubectl logs -f interrupted, a watch abandoned)
                    self.close_connection = True

            def _authorized(self) -> bool:
                header = self.headers.get("Authorization", "")
                scheme, _, given = header.partition(" ")
                return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), server.token)

            def _body(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                if not length:
                    return None
                raw = self.rfile.read(length)
                try:
                    return json.loads(raw)
                except ValueError:
                    import yaml  # kubectl sends JSON; a YAML body is accepted as the real server accepts it

                    try:
                        return yaml.safe_load(raw)
                    except yaml.YAMLError as err:
                        raise errors.bad_request(f"the request body is neither JSON nor YAML: {err}") from None

            def _faulted(self) -> bool:
                """Answer (or not) as the outage switch says; False when no fault is on."""
                mode = server.faults.current()
                if mode == "none":
                    return False
                server.faults.count(self.path)
                if mode == "unavailable":
                    self.rfile.read(int(self.headers.get("Content-Length") or 0))  # the connection stays usable
                    data = json.dumps(StatusError(503, "ServiceUnavailable", "the server is currently unable to "
                                                  "handle the request").body()).encode()
                    self.send_response(503)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.send_header("Retry-After", str(server.faults.retry_after))
                    self.end_headers()
                    self.wfile.write(data)
                    return True
                if mode == "hang":
                    server.faults.wait_while_hanging(server.stopping)
                faults.reset(self.connection)
                self.close_connection = True
                return True

            def _faults_control(self, method: str) -> None:
                if not self._authorized():
                    return self._send(401, errors.unauthorized().body())
                if method == "POST":
                    body = self._body()
                    if not isinstance(body, dict):
                        raise errors.bad_request("the body must be a JSON object: {mode, seconds, retry_after} or "
                                                 "{cut_watches: true}")
                    try:
                        if body.get("cut_watches") and "mode" not in body:
                            return self._send(200, {"cut": server.faults.cut_watches(), **server.faults.state()})
                        server.faults.set(body.get("mode", "none"), body.get("seconds"), body.get("retry_after", 1))
                    except ValueError as err:
                        raise errors.bad_request(str(err)) from None
                elif method != "GET":
                    raise errors.method_not_allowed()
                return self._send(200, server.faults.state())

            def _route(self, method: str) -> None:
                try:
                    if urlparse(self.path).path == faults.CONTROL_PATH:
                        return self._faults_control(method)
                    if self._faulted():
                        return
                    self._dispatch(method)
                except StatusError as err:
                    self._send(err.code, err.body())
                except SelectorError as err:
                    self._send(400, errors.bad_request(str(err)).body())
                except (ConnectionError, ssl.SSLError):
                    self.close_connection = True
                except Exception as err:  # a bug must answer 500, not drop the connection
                    self._send(500, StatusError(500, "InternalError", f"an error on the server: {err!r}").body())

            def _dispatch(self, method: str) -> None:
                url = urlparse(self.path)
                if url.path in ("/healthz", "/livez", "/readyz"):
                    return self._send(200, b"ok", "text/plain")
                if not self._authorized():
                    return self._send(401, errors.unauthorized().body())
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                body = self._body() if method in ("POST", "PUT", "DELETE", "PATCH") else None
                target = parse_path(url.path)
                if target is None:
                    raise StatusError(404, "NotFound", "the server could not find the requested resource")
                if isinstance(target, dict):
                    if method != "GET":
                        raise errors.method_not_allowed()
                    return self._send(200, target)
                route = target
                if route.resource is not resources.SELF_SUBJECT_ACCESS_REVIEWS:  # any user may ask about itself
                    server.access.check(_verb(method, route, query), route.resource.group, route.resource.plural,
                                        route.sub, route.namespace, route.name)
                if method == "GET":
                    return self._get(route, query)
                if route.name is None and method == "POST":
                    return self._send(*server.create(route, body, query))
                if route.name is not None and method == "PUT":
                    return self._send(*server.replace(route, body, query))
                if route.name is not None and method == "DELETE" and route.sub is None:
                    return self._delete(url.path, route, body, query)
                if route.name is not None and method == "PATCH":
                    return self._send(*server.patch(route, body, self.headers.get("Content-Type"), query))
                raise errors.method_not_allowed()

            def _delete(self, path: str, route: Route, body: Any, query: dict[str, str]) -> None:
                code = 500
                try:
                    code, answer = server.delete(route, body, query)
                except StatusError as err:
                    code = err.code
                    raise
                finally:
                    server.audit_delete(path, self.headers, code)
                self._send(code, answer)

            def _as_table(self) -> bool:
                return "as=Table" in self.headers.get("Accept", "")

            def _get(self, route: Route, query: dict[str, str]) -> None:
                resource = route.resource
                if route.name is not None:
                    if route.sub == "log" and resource is PODS:
                        text, follow = server.pod_log(route, query)
                        if follow is None:
                            return self._send(200, text, "text/plain")
                        return self._stream("text/plain", text, follow)
                    if route.sub not in (None, "status"):
                        raise StatusError(404, "NotFound", "the server could not find the requested resource")
                    obj = server.store.get(resource, route.namespace or "", route.name)
                    if self._as_table():
                        return self._send(200, tables.table(resource.plural, [obj], obj["metadata"]["resourceVersion"],
                                                            query.get("includeObject", "Metadata")))
                    return self._send(200, obj)
                labels, fields = query.get("labelSelector", ""), query.get("fieldSelector", "")
                if _truthy(query.get("watch")):
                    return self._watch(route, query, labels, fields)
                items, rv = server.store.list(resource, route.namespace, labels, fields)
                if self._as_table():
                    return self._send(200, tables.table(resource.plural, items, rv, query.get("includeObject",
                                                                                              "Metadata")))
                return self._send(200, {"kind": f"{resource.kind}List", "apiVersion": resource.api_version,
                                        "metadata": {"resourceVersion": rv}, "items": items})

            def _watch(self, route: Route, query: dict[str, str], labels: str, fields: str) -> None:
                timeout = float(query.get("timeoutSeconds") or DEFAULT_WATCH_SECONDS)
                bookmarks = BOOKMARK_SECONDS if _truthy(query.get("allowWatchBookmarks")) else None
                events = server.store.watch(route.resource, route.namespace, query.get("resourceVersion"), labels,
                                            fields, timeout, bookmarks)
                table, include = self._as_table(), query.get("includeObject", "Metadata")
                first = [True]

                def lines() -> Iterator[bytes]:
                    for event in events:
                        if server.stopping.is_set():
                            return
                        obj = event["object"]
                        if table and event["type"] not in ("ERROR", "BOOKMARK"):
                            obj = tables.table(route.resource.plural, [obj], obj["metadata"]["resourceVersion"],
                                               include, with_columns=first[0])
                            first[0] = False
                        yield (json.dumps({"type": event["type"], "object": obj}) + "\n").encode()

                server.faults.watch_opened(self.connection)  # an outage cuts open watches
                try:
                    self._stream("application/json", b"", lines())
                finally:
                    server.faults.watch_closed(self.connection)

            def do_GET(self) -> None:
                self._route("GET")

            def do_POST(self) -> None:
                self._route("POST")

            def do_PUT(self) -> None:
                self._route("PUT")

            def do_DELETE(self) -> None:
                self._route("DELETE")

            def do_PATCH(self) -> None:
                self._route("PATCH")

        return Handler
