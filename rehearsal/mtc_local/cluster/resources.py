"""The resources the local API server serves, and the discovery documents `kubectl` reads to find them.

Discovery: https://kubernetes.io/docs/concepts/overview/kubernetes-api/#discovery-api (the unaggregated form:
/api -> APIVersions, /apis -> APIGroupList, /api/v1 and /apis/<group>/<version> -> APIResourceList).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from mtc_provider.core.basics import vocabulary

READ_VERBS = ("get", "list", "watch")
WRITE_VERBS = ("create", "delete", "update", "patch")


@dataclass(frozen=True)
class Resource(vocabulary.Resource):
    """A resource the local API server serves: the core's identity of it, and what discovery lists of it."""

    verbs: tuple[str, ...] = ()
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()

    @classmethod
    def serving(cls, identity: vocabulary.Resource, verbs: tuple[str, ...], short_names: tuple[str, ...] = (),
                subresources: tuple[str, ...] = ()) -> Resource:
        """One of the provider's resources (its identity from the core vocabulary), as this server serves it."""
        return cls(**dataclasses.asdict(identity), verbs=verbs, short_names=short_names, subresources=subresources)


NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False, ("create", "get", "list", "watch"), ("ns",))
PODS = Resource("", "v1", "pods", "Pod", True, READ_VERBS + ("delete",), ("po",), ("log", "status"))
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap", True, READ_VERBS + WRITE_VERBS, ("cm",))
# Read-only: the kubelet's events about pods (cluster/pods.py pod_events), listed as `kubectl describe pod` does.
EVENTS = Resource("", "v1", "events", "Event", True, READ_VERBS, ("ev",))
# The custom resources: their identities are the core vocabulary's (what the provider's adapters call).
JOBSETS = Resource.serving(vocabulary.JOBSET, READ_VERBS + ("create", "delete", "patch"), ("js",), ("status",))
CHECKPOINT_CONFIGURATIONS = Resource.serving(vocabulary.CHECKPOINT_CONFIGURATION, READ_VERBS + WRITE_VERBS)
# Create-only, never stored: "may I?" for the token's own user (local/cluster/access.py answers it).
SELF_SUBJECT_ACCESS_REVIEWS = Resource("authorization.k8s.io", "v1", "selfsubjectaccessreviews",
                                       "SelfSubjectAccessReview", False, ("create",))
ALL = (NAMESPACES, PODS, EVENTS, CONFIGMAPS, JOBSETS, CHECKPOINT_CONFIGURATIONS, SELF_SUBJECT_ACCESS_REVIEWS)


def find(group: str, version: str, plural: str) -> Resource | None:
    return next((r for r in ALL if (r.group, r.version, r.plural) == (group, version, plural)), None)


def api_versions() -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}


def api_group_list() -> dict[str, Any]:
    groups = []
    for group in sorted({r.group for r in ALL if r.group}):
        versions = sorted({r.version for r in ALL if r.group == group})
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        groups.append({"name": group, "versions": entries, "preferredVersion": entries[0]})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def resource_list(group: str, version: str) -> dict[str, Any] | None:
    served = [r for r in ALL if (r.group, r.version) == (group, version)]
    if not served:
        return None
    entries = []
    for r in served:
        entries.append({"name": r.plural, "singularName": r.kind.lower(), "namespaced": r.namespaced,
                        "kind": r.kind, "verbs": list(r.verbs), "shortNames": list(r.short_names)})
        for sub in r.subresources:
            entries.append({"name": f"{r.plural}/{sub}", "singularName": "", "namespaced": r.namespaced,
                            "kind": r.kind if sub == "status" else "Pod",
                            "verbs": ["get", "patch"] if sub == "status" and "patch" in r.verbs else ["get"]})
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": served[0].api_version,
            "resources": entries}


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def openapi_v3_root() -> dict[str, Any]:
    """/openapi/v3: where each group-version's document is
    (https://kubernetes.io/docs/concepts/overview/kubernetes-api/#openapi-v3)."""
    versions = sorted({(r.group, r.version) for r in ALL})
    return {"paths": {_gv_path(g, v): {"serverRelativeURL": f"/openapi/v3/{_gv_path(g, v)}?hash=mtc-local"}
                      for g, v in versions}}


def openapi_v3_document(path: str) -> dict[str, Any] | None:
    """/openapi/v3/<group-version>: the operations, with the query parameters they accept; kubectl reads the
    PATCH operation's parameters to learn that the server validates fields itself (`fieldValidation`)."""
    served = [r for r in ALL if _gv_path(r.group, r.version) == path]
    if not served:
        return None
    paths = {}
    params = [{"name": name, "in": "query", "schema": {"type": "string"}, "uniqueItems": True}
              for name in ("dryRun", "fieldManager", "fieldValidation")]
    for r in served:
        scope = "namespaces/{namespace}/" if r.namespaced else ""
        gvk = {"group": r.group, "version": r.version, "kind": r.kind}
        item = f"/{_gv_path(r.group, r.version)}/{scope}{r.plural}/{{name}}"
        paths[item] = {"patch": {"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": "patch",
                                 "parameters": params, "responses": {"200": {"description": "OK"}}}}
        paths[f"/{_gv_path(r.group, r.version)}/{scope}{r.plural}"] = {
            "post": {"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": "post", "parameters": params,
                     "responses": {"201": {"description": "Created"}}}}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.0"}, "paths": paths,
            "components": {"schemas": {}}}
