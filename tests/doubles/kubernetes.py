"""Fake Kubernetes API server (HTTPS) for the cluster-scoped CheckpointConfiguration custom-objects paths.

Models: get/create/replace/merge-patch of /apis/checkpointing.gke.io/v1/checkpointconfigurations[/name],
404 NotFound and 409 AlreadyExists/Conflict (stale metadata.resourceVersion) as Status objects, bearer
tokens (expired ones get 401), and pruning of spec fields the CRD schema does not declare (as the API
server does for structural schemas). SelfSubjectAccessReview (authorization.k8s.io/v1) answers `status.allowed`
for the caller, from `denied` ("<verb> <resource>" entries; everything else is allowed, as for a GKE identity with
roles/container.developer: https://kubernetes.io/docs/reference/access-authn-authz/authorization/#checking-api-access).
Does not model: watches, admission, other resources, RBAC enforcement on requests.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.doubles.base import FakeServer, HttpError, match

BASE = "/apis/checkpointing.gke.io/v1/checkpointconfigurations"


class FakeKubernetesServer(FakeServer):
    def __init__(self, spec_fields: set[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.objects: dict[str, dict[str, Any]] = {}
        self.spec_fields = spec_fields
        self.version = 100
        self.writes = 0
        self.denied: set[str] = set()  # "<verb> <resource>[/<subresource>]" a SelfSubjectAccessReview denies

    def error_body(self, status: int, message: str, reason: str = "") -> dict[str, Any]:
        reasons = {401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "Conflict", 429: "TooManyRequests",
                   503: "ServiceUnavailable"}
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
                "reason": reason or reasons.get(status, "Unknown"), "code": status}

    def _store(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        self.writes += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        if self.spec_fields is not None:
            obj["spec"] = {k: v for k, v in (obj.get("spec") or {}).items() if k in self.spec_fields}
        self.objects[obj["metadata"]["name"]] = obj
        return copy.deepcopy(obj)

    def route(self, method: str, path: str, query: dict, body: Any) -> tuple[int, Any]:
        if path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" and method == "POST":
            attributes = body["spec"]["resourceAttributes"]
            resource = attributes.get("resource", "") + (f"/{attributes['subresource']}"
                                                         if attributes.get("subresource") else "")
            allowed = f"{attributes.get('verb')} {resource}" not in self.denied
            return 201, {"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
                         "metadata": {}, "spec": body["spec"], "status": {"allowed": allowed}}
        if path == BASE and method == "POST":
            name = body["metadata"]["name"]
            if name in self.objects:
                raise HttpError(409, f'checkpointconfigurations.checkpointing.gke.io "{name}" already exists',
                                "AlreadyExists")
            obj = copy.deepcopy(body)
            obj["metadata"].update(uid=f"uid-{name}", creationTimestamp="2026-11-01T00:00:00Z", generation=1)
            return 201, self._store(obj)
        if (m := match(BASE + r"/(?P<name>[^/]+)", path)):
            name = m["name"]
            current = self.objects.get(name)
            if current is None:
                raise HttpError(404, f'checkpointconfigurations.checkpointing.gke.io "{name}" not found', "NotFound")
            if method == "GET":
                return 200, copy.deepcopy(current)
            if method == "PUT":
                if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                    raise HttpError(409, f'Operation cannot be fulfilled on checkpointconfigurations.checkpointing.gke.io '
                                         f'"{name}": the object has been modified; please apply your changes to the '
                                         f'latest version and try again', "Conflict")
                obj = copy.deepcopy(body)
                obj["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
                return 200, self._store(obj)
            if method == "PATCH":
                obj = copy.deepcopy(current)
                obj["spec"] = {**obj.get("spec", {}), **(body.get("spec") or {})}
                return 200, self._store(obj)
        raise HttpError(404, f"no route for {method} {path}")
