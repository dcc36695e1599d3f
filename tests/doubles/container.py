"""Fake Container API (v1 REST) plus Resource Manager projects.get: clusters get/update, node pools, operations.

Models: updates and node-pool creates run as operations that finish after `op_polls` reads of
operations.get; a change lands when its operation finishes; an update that sets both the workload pool
and addons is refused (the guide: two updates); `fail_next_operation` makes the next operation end DONE
with an error. Does not model: other cluster fields' semantics, node creation, quotas, concurrent-operation
locking, the gRPC transport.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.doubles.google import GoogleApiDouble
from tests.doubles.http import HttpError, match

CLUSTER = r"/v1/projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/clusters/(?P<cluster>[^/:]+)"


def base_cluster(name: str = "mtc", version: str = "1.32.4-gke.1415000") -> dict[str, Any]:
    return {"name": name, "currentMasterVersion": version, "status": "RUNNING", "endpoint": "127.0.0.1",
            "masterAuth": {"clusterCaCertificate": ""},
            "addonsConfig": {"httpLoadBalancing": {"disabled": False}}, "nodePools": []}


class FakeContainerServer(GoogleApiDouble):
    def __init__(self, project_number: str = "123456789012", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.clusters: dict[str, dict[str, Any]] = {}
        self.operations: dict[str, dict[str, Any]] = {}
        self.pending: dict[str, Any] = {}  # operation name -> function applying its change
        self.op_polls = 1
        self.fail_next_operation = ""
        self.project_number = project_number
        self.writes = 0

    def add_cluster(self, project: str, location: str, cluster: dict[str, Any]) -> None:
        self.clusters[f"{project}/{location}/{cluster['name']}"] = cluster

    def cluster(self, project: str, location: str, name: str) -> dict[str, Any]:
        key = f"{project}/{location}/{name}"
        if key not in self.clusters:
            raise HttpError(404, f"Not found: projects/{project}/locations/{location}/clusters/{name}.")
        return self.clusters[key]

    def _operation(self, project: str, location: str, kind: str, apply: Any) -> dict[str, Any]:
        self.writes += 1
        name = f"operation-{len(self.operations) + 1}"
        op = {"name": name, "operationType": kind, "status": "RUNNING", "polls": 0, "error_message": self.fail_next_operation,
              "selfLink": f"https://container.googleapis.com/v1/projects/{project}/locations/{location}/operations/{name}"}
        self.fail_next_operation = ""
        self.operations[name] = op
        self.pending[name] = apply
        return self._public(op)

    @staticmethod
    def _public(op: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in op.items() if k not in ("polls", "error_message")}
        if op["status"] == "DONE" and op["error_message"]:
            out["error"] = {"code": 13, "message": op["error_message"]}
            out["statusMessage"] = op["error_message"]
        return out

    def route(self, method: str, path: str, query: dict, body: Any) -> tuple[int, Any]:
        if (m := match(r"/v3/projects/(?P<project>[^/]+)", path)) and method == "GET":
            return 200, {"name": f"projects/{self.project_number}", "projectId": m["project"], "state": "ACTIVE"}
        if (m := match(r"/v1/projects/(?P<p>[^/]+)/locations/(?P<l>[^/]+)/operations/(?P<op>[^/]+)", path)):
            op = self.operations.get(m["op"]) or _missing(path)
            if op["status"] != "DONE":
                op["polls"] += 1
                if op["polls"] >= self.op_polls:
                    op["status"] = "DONE"
                    if not op["error_message"]:
                        self.pending.pop(m["op"])()
            return 200, self._public(op)
        if (m := match(CLUSTER + "/nodePools", path)):
            cluster = self.cluster(m["project"], m["location"], m["cluster"])
            if method == "GET":
                return 200, {"nodePools": copy.deepcopy(cluster["nodePools"])}
            pool = body["nodePool"]
            if any(p["name"] == pool["name"] for p in cluster["nodePools"]):
                raise HttpError(409, f"Already exists: node pool {pool['name']}.")
            return 200, self._operation(m["project"], m["location"], "CREATE_NODE_POOL",
                                        lambda: cluster["nodePools"].append({**pool, "status": "RUNNING"}))
        if (m := match(CLUSTER, path)):
            cluster = self.cluster(m["project"], m["location"], m["cluster"])
            if method == "GET":
                return 200, copy.deepcopy(cluster)
            if method == "PUT":
                return 200, self._update(m, cluster, body.get("update") or {})
        raise HttpError(404, f"no route for {method} {path}")

    def _update(self, m: dict[str, str], cluster: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
        pool = update.get("desiredWorkloadIdentityConfig")
        addons = update.get("desiredAddonsConfig")
        if pool and addons:
            raise HttpError(400, "workload pool and addons cannot be updated in one request")

        def apply() -> None:
            if pool:
                cluster["workloadIdentityConfig"] = dict(pool)
            for key, value in (addons or {}).items():  # unset addons are left as they are
                cluster.setdefault("addonsConfig", {})[key] = dict(value)

        return self._operation(m["project"], m["location"], "UPDATE_CLUSTER", apply)


def _missing(path: str) -> Any:
    raise HttpError(404, f"Not found: {path}")
