"""The one Kubernetes API double: the resources the provider uses, as the Kubernetes API documents them.

Resources (`RESOURCES`): JobSets (jobset.x-k8s.io/v1alpha2, namespaced), CheckpointConfigurations
(checkpointing.gke.io/v1, cluster-scoped), ConfigMaps and Pods (core v1). Each answers as
https://kubernetes.io/docs/reference/using-api/api-concepts/ describes:

- create (POST) gives the object a uid, creationTimestamp, generation 1 and a resourceVersion (201); a name already
  taken is 409 AlreadyExists; get of a missing name is 404 NotFound; errors are `Status` objects.
- replace (PUT) is compare-and-set on metadata.resourceVersion: a stale one is 409 Conflict ("the object has been
  modified"); PATCH is a JSON merge patch (RFC 7386: objects merge, null deletes, anything else replaces; the
  rehearsal API server's own `mtc_local.cluster.patches.merge_patch`).
- list takes a `labelSelector` (read by the one selector matcher, the rehearsal API server's
  `mtc_local.cluster.selectors`: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/
  #label-selectors) and answers a `<Kind>List` with the list's resourceVersion.
- watch (`?watch=true`, `fieldSelector=metadata.name=N`, `resourceVersion`) streams newline-delimited
  `{"type", "object"}` events after that version. `script` drives the stream one entry at a time: a status dict (set
  on the object and sent as MODIFIED), or "end-stream" (the server closes it, as at its timeout), "401" / "429" /
  "503" (the next request gets that error), "410" (the next watch answers ERROR 410 Expired, "too old resource
  version"); with nothing scripted the stream ends after 0.3 s.
- delete with propagationPolicy Foreground answers 200 and leaves the object readable with
  metadata.deletionTimestamp and the foregroundDeletion finalizer (watchers get MODIFIED) until its dependents are
  gone, here `deletion_reads` further GETs; then DELETED
  (https://kubernetes.io/docs/concepts/architecture/garbage-collection/#foreground-deletion). Other deletes are at once.
- the structural schema of a CRD prunes unknown fields: with `spec_fields`, a CheckpointConfiguration keeps only those
  spec fields (https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/
  #field-pruning).
- pods are listed by label selector from `pods`; `GET .../pods/NAME/log` (Pod v1 "read log") honours `tailLines`
  (the last N lines), `limitBytes` (at most N bytes), `sinceSeconds` (lines newer than now - N) and `timestamps`
  (each line prefixed with its RFC 3339 time and a space; booleans parsed as Go's strconv.ParseBool).
- SelfSubjectAccessReview (authorization.k8s.io/v1) answers `status.allowed` for the caller from `denied`
  ("<verb> <resource>[/<subresource>]"; everything else is allowed, as for a GKE identity with
  roles/container.developer: https://kubernetes.io/docs/reference/access-authn-authz/authorization/#checking-api-access).
- the JobSet CRD (`jobset_crd`: "v0.12.0", the default, "v0.10.1", "v0.9.1", or None for no JobSet installed) is
  served at `GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions/jobsets.jobset.x-k8s.io` as the upstream
  file has it (tests/data/third_party); a JobSet create is checked against its served schema as the API server
  does it (Kubernetes "API Concepts", Field validation: https://kubernetes.io/docs/reference/using-api/api-concepts/
  #field-validation): with `fieldValidation=Strict` an unknown field is 400 BadRequest `strict decoding error:
  unknown field "<path>"`; otherwise it is pruned silently (the CRD's structural schema, field pruning).
- discovery: `GET /apis/<group>/<version>` lists the served resources of that group (an `APIResourceList`; a group
  with none served is 404, as on a cluster without JobSet installed), `GET /version` the server's version.
Bearer tokens, queued faults and `errors_next` come from the HTTP base (tests/doubles/http.py).
Does not model: admission, RBAC enforcement on requests, field selectors other than metadata.name, server-side apply.
"""

from __future__ import annotations

import copy
import functools
import threading
import time
from collections import namedtuple
from datetime import datetime, timezone
from typing import Any, Iterator

from mtc_local.cluster import schemas
from mtc_local.cluster.patches import merge_patch
from mtc_local.cluster.selectors import label_matcher

from tests.doubles.http import HttpDouble, HttpError, Raw, Stream, match


# The resources as the Kubernetes and JobSet API references name them (group, version, plural, kind, namespaced),
# spelled here apart from the provider's core/basics/vocabulary.py so that a wrong spelling there fails against this double.
Resource = namedtuple("Resource", "group version plural kind namespaced")


def api_prefix(resource: Resource) -> str:
    return f"/apis/{resource.group}/{resource.version}" if resource.group else f"/api/{resource.version}"


def qualified(resource: Resource) -> str:
    return f"{resource.plural}.{resource.group}" if resource.group else resource.plural


RESOURCES = {r.plural: r for r in (
    Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", True),
    Resource("checkpointing.gke.io", "v1", "checkpointconfigurations", "CheckpointConfiguration", False),
    Resource("", "v1", "configmaps", "ConfigMap", True),
    Resource("", "v1", "pods", "Pod", True),
)}
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
JOBSET_CRD_NAME = "jobsets.jobset.x-k8s.io"


@functools.lru_cache(maxsize=None)
def jobset_crd(version: str) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """(the upstream JobSet CRD of that release, its served schema, a strict validator of it), loaded once."""
    import yaml

    from tests.conftest import reference_file

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load(reference_file(f"jobset-crd-{version}.yaml").read_text(), Loader=loader)
    schema = schemas.openapi_schema(crd)
    return crd, schema, schemas.strict_validator(schema)


REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "Conflict", 410: "Expired",
           429: "TooManyRequests", 503: "ServiceUnavailable"}
SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


def status_body(code: int, message: str, reason: str = "") -> dict[str, Any]:
    """A `Status` object, as the API server answers an error (and a delete at once)."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure" if code >= 400 else "Success",
            "message": message, "reason": reason or REASONS.get(code, "" if code < 400 else "Unknown"), "code": code}


class KubernetesApiDouble(HttpDouble):
    def __init__(self, spec_fields: set[str] | None = None, served: set[str] | None = None,
                 jobset_crd: str | None = "v0.12.0", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.jobset_crd = jobset_crd
        self.objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {plural: {} for plural in RESOURCES}
        self.served = set(RESOURCES) if served is None else set(served)
        self.spec_fields = spec_fields
        self.rv = 0
        self.writes = 0
        self.events: list[tuple[int, str, str, dict[str, Any]]] = []  # (resourceVersion, plural, type, object)
        self.script: list[Any] = []
        self.watch_gone = 0
        self.deletion_reads = 1  # GETs a foreground deletion still answers with the object
        self.terminating: dict[tuple[str, str, str], int] = {}
        self.pods: list[dict[str, Any]] = []
        self.logs: dict[str, list[tuple[float, str]]] = {}  # pod name -> (time, line)
        self.denied: set[str] = set()
        self.changed = threading.Condition(self.lock)

    # --- what tests seed and read -------------------------------------------------------------------------
    @property
    def jobsets(self) -> dict[tuple[str, str], dict[str, Any]]:
        return self.objects["jobsets"]

    @property
    def configmaps(self) -> dict[tuple[str, str], dict[str, Any]]:
        return self.objects["configmaps"]

    @property
    def checkpoint_configurations(self) -> dict[str, dict[str, Any]]:
        return {name: obj for (_, name), obj in self.objects["checkpointconfigurations"].items()}

    def put(self, namespace: str, body: dict[str, Any], plural: str = "jobsets") -> dict[str, Any]:
        """Store an object as a create would (no checks), and tell the watchers."""
        with self.lock:
            obj = copy.deepcopy(body)
            obj["metadata"]["namespace"] = namespace
            obj.setdefault("status", {})
            return self._store(plural, namespace, obj, "ADDED")

    def set_status(self, namespace: str, name: str, status: dict[str, Any], plural: str = "jobsets") -> None:
        with self.lock:
            obj = self.objects[plural][(namespace, name)]
            obj["status"] = status
            self._store(plural, namespace, obj, "MODIFIED", write=False)

    def write_log(self, pod: str, *lines: str, at: float | None = None) -> None:
        for line in lines:
            self.logs.setdefault(pod, []).append((at if at is not None else time.time(), line))

    # --- the API ------------------------------------------------------------------------------------------
    def error_body(self, status: int, message: str, reason: str = "") -> dict[str, Any]:
        return status_body(status, message, reason)

    def route(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> Any:
        args = {key: values[-1] for key, values in query.items()}
        if path == "/version":
            return 200, {"major": "1", "minor": "32", "gitVersion": "v1.32.0"}
        if path == SSAR and method == "POST":
            return 201, self._access_review(body)
        if path.startswith(CRD_PATH) and method == "GET":
            name = path[len(CRD_PATH):]
            if name != JOBSET_CRD_NAME or self.jobset_crd is None or "jobsets" not in self.served:
                raise HttpError(404, f'customresourcedefinitions.apiextensions.k8s.io "{name}" not found', "NotFound")
            return 200, copy.deepcopy(jobset_crd(self.jobset_crd)[0])
        for resource in RESOURCES.values():
            if resource.plural not in self.served:
                continue
            scope = r"/namespaces/(?P<ns>[^/]+)" if resource.namespaced else ""
            found = match(api_prefix(resource) + scope + "/" + resource.plural + r"(?:/(?P<name>[^/]+))?(?P<log>/log)?",
                          path)
            if found:
                return self._resource(resource, method, found.get("ns") or "", found.get("name"), bool(found["log"]),
                                      args, body)
        group_version = match(r"/apis/(?P<group>[^/]+)/(?P<version>[^/]+)", path)
        if group_version and method == "GET":
            listed = [r for r in RESOURCES.values() if r.plural in self.served and r.group == group_version["group"]
                      and r.version == group_version["version"]]
            if listed:
                return 200, {"kind": "APIResourceList", "apiVersion": "v1",
                             "groupVersion": f"{listed[0].group}/{listed[0].version}",
                             "resources": [{"name": r.plural, "singularName": r.kind.lower(), "namespaced": r.namespaced,
                                            "kind": r.kind, "verbs": ["create", "delete", "get", "list", "patch",
                                                                      "update", "watch"]} for r in listed]}
        raise HttpError(404, f"the server could not find the requested resource ({method} {path})", "NotFound")

    def _resource(self, resource: Resource, method: str, namespace: str, name: str | None, log: bool,
                  args: dict[str, str], body: Any) -> Any:
        what = qualified(resource)
        if name is None:
            if method == "POST":
                if resource.plural == "jobsets" and self.jobset_crd is not None:
                    body = self._field_validation(body, args.get("fieldValidation", ""))
                return 201, self._create(resource, namespace, body)
            if args.get("watch") in ("true", "True", "1"):
                return self._watch(resource, namespace, args)
            return 200, self._list(resource, namespace, args.get("labelSelector", ""))
        if resource.plural == "pods":
            pod = next((p for p in self.pods if p["metadata"]["name"] == name), None)
            if pod is None:
                raise HttpError(404, f'pods "{name}" not found', "NotFound")
            return self._log(name, args) if log else (200, copy.deepcopy(pod))
        key = (namespace, name)
        store = self.objects[resource.plural]
        if method == "GET":
            self._count_down_deletion(resource, key)
        current = store.get(key)
        if current is None:
            raise HttpError(404, f'{what} "{name}" not found', "NotFound")
        if method == "GET":
            return 200, copy.deepcopy(current)
        if method == "PUT":
            sent = (body.get("metadata") or {}).get("resourceVersion")
            if sent is not None and sent != current["metadata"]["resourceVersion"]:
                raise HttpError(409, f'Operation cannot be fulfilled on {what} "{name}": the object has been '
                                     f'modified; please apply your changes to the latest version and try again',
                                "Conflict")
            obj = copy.deepcopy(body)
            obj["metadata"] = {**current["metadata"], **obj["metadata"], "namespace": current["metadata"].get(
                "namespace"), "generation": current["metadata"].get("generation", 1) + 1}
            return 200, self._store(resource.plural, namespace, obj, "MODIFIED")
        if method == "PATCH":
            return 200, self._store(resource.plural, namespace, merge_patch(current, body), "MODIFIED")
        if method == "DELETE":
            return 200, self._delete(resource, key, (body or {}).get("propagationPolicy")
                                     or args.get("propagationPolicy", "Background"))
        raise HttpError(405, f"{method} is not allowed on {what}", "MethodNotAllowed")

    def _field_validation(self, body: dict[str, Any], mode: str) -> dict[str, Any]:
        """Strict: an unknown field is refused (400); otherwise the structural schema prunes it."""
        _, schema, strict = jobset_crd(self.jobset_crd)
        if mode == "Strict":
            unknown = schemas.unknown_field(strict, body)
            if unknown:
                raise HttpError(400, f'strict decoding error: unknown field "{unknown}"', "BadRequest")
        return schemas.pruned(schema, body)

    def _create(self, resource: Resource, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        if (namespace, name) in self.objects[resource.plural]:
            raise HttpError(409, f'{qualified(resource)} "{name}" already exists', "AlreadyExists")
        obj = copy.deepcopy(body)
        obj["metadata"].update(uid=f"uid-{name}", creationTimestamp="2026-11-01T00:00:00Z", generation=1)
        if resource.namespaced:
            obj["metadata"]["namespace"] = namespace
        if resource.plural == "jobsets":
            obj.setdefault("status", {})
        return self._store(resource.plural, namespace, obj, "ADDED")

    def _store(self, plural: str, namespace: str, obj: dict[str, Any], event: str, write: bool = True) -> dict:
        self.rv += 1
        if write:
            self.writes += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        if plural == "checkpointconfigurations" and self.spec_fields is not None:
            obj["spec"] = {k: v for k, v in (obj.get("spec") or {}).items() if k in self.spec_fields}
        self.objects[plural][(namespace, obj["metadata"]["name"])] = obj
        self.events.append((self.rv, plural, event, copy.deepcopy(obj)))
        self.changed.notify_all()
        return copy.deepcopy(obj)

    def _list(self, resource: Resource, namespace: str, selector: str) -> dict[str, Any]:
        matches = label_matcher(selector)
        if resource.plural == "pods":
            candidates = self.pods
        else:
            candidates = [o for (ns, _), o in self.objects[resource.plural].items() if ns == namespace]
        items = [copy.deepcopy(o) for o in candidates
                 if (resource.plural != "pods" or o["metadata"].get("namespace", namespace) == namespace)
                 and matches(o["metadata"].get("labels") or {})]
        return {"kind": f"{resource.kind}List", "apiVersion": f"{resource.group}/{resource.version}".lstrip("/"),
                "metadata": {"resourceVersion": str(self.rv)}, "items": items}

    def _delete(self, resource: Resource, key: tuple[str, str], policy: str) -> dict[str, Any]:
        store = self.objects[resource.plural]
        tracked = (resource.plural, *key)
        if tracked in self.terminating:
            return copy.deepcopy(store[key])
        if policy == "Foreground" and resource.plural == "jobsets" and self.deletion_reads > 0:
            metadata = store[key]["metadata"]
            metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
            metadata["finalizers"] = [*metadata.get("finalizers", []), "foregroundDeletion"]
            self.terminating[tracked] = self.deletion_reads
            return self._store(resource.plural, key[0], store[key], "MODIFIED", write=False)
        self._remove(resource.plural, key)
        return status_body(200, "deleted")

    def _count_down_deletion(self, resource: Resource, key: tuple[str, str]) -> None:
        tracked = (resource.plural, *key)
        if tracked in self.terminating:
            if self.terminating[tracked] <= 0:  # its dependents are gone: the object goes
                del self.terminating[tracked]
                self._remove(resource.plural, key)
            else:
                self.terminating[tracked] -= 1

    def _remove(self, plural: str, key: tuple[str, str]) -> None:
        obj = self.objects[plural].pop(key)
        self.rv += 1
        self.events.append((self.rv, plural, "DELETED", copy.deepcopy(obj)))
        self.changed.notify_all()

    def _watch(self, resource: Resource, namespace: str, args: dict[str, str]) -> Stream:
        name = args.get("fieldSelector", "").partition("metadata.name=")[2]
        since = int(args.get("resourceVersion") or 0)
        return Stream(self._events(resource.plural, namespace, name, since))

    def _events(self, plural: str, namespace: str, name: str, since: int) -> Iterator[dict[str, Any]]:
        with self.lock:
            gone = self.watch_gone > 0
            self.watch_gone -= 1 if gone else 0
        if gone:
            yield {"type": "ERROR", "object": status_body(410, f"too old resource version: {since}")}
            return
        while True:
            with self.lock:
                pending = [(rv, kind, obj) for rv, p, kind, obj in self.events
                           if p == plural and rv > since and (not name or obj["metadata"]["name"] == name)
                           and obj["metadata"].get("namespace", "") == namespace]
            for rv, kind, obj in pending:
                yield {"type": kind, "object": obj}
                since = rv
            with self.lock:
                if not self.script:
                    self.changed.wait(timeout=0.3)
                    if not self.script:
                        return
                entry = self.script.pop(0)
                if entry == "end-stream":
                    return
                if entry == "410":
                    self.watch_gone += 1
                    return
                if entry in ("401", "429", "503"):
                    self.errors_next.append(int(entry))
                    return
                self.set_status(namespace, name, entry, plural)

    def _log(self, pod: str, args: dict[str, str]) -> Raw:
        entries = self.logs.get(pod, [])
        if "sinceSeconds" in args:
            entries = [e for e in entries if e[0] >= time.time() - int(args["sinceSeconds"])]
        if "tailLines" in args:
            entries = entries[-int(args["tailLines"]):] if int(args["tailLines"]) else []
        stamp = args.get("timestamps") in ("1", "t", "T", "TRUE", "true", "True")
        text = "".join((datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f000Z ") if stamp else "")
                       + line + "\n" for t, line in entries)
        data = text.encode()
        return Raw(200, data[: int(args["limitBytes"])] if "limitBytes" in args else data)

    def _access_review(self, body: dict[str, Any]) -> dict[str, Any]:
        attributes = body["spec"]["resourceAttributes"]
        resource = attributes.get("resource", "") + (f"/{attributes['subresource']}"
                                                     if attributes.get("subresource") else "")
        allowed = f"{attributes.get('verb')} {resource}" not in self.denied
        return {"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1", "metadata": {},
                "spec": body["spec"], "status": {"allowed": allowed}}
