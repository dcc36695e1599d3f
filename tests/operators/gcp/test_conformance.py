"""Every request the GCP operators send, in the setup DAG's order, checked against Google's discovery documents.

The operators run through the real client libraries (google-cloud-container REST, google-cloud-storage,
google-cloud-resource-manager) against the fakes, which record each request as sent (`HttpDouble.requests`, tests/doubles/http.py).
Each request is matched to exactly one discovery method (HTTP method + path template with its parameter
patterns) and checked: the query parameters are the method's or the API's standard ones, with their types and
enums; every required parameter is present; the body follows the method's request schema: no field the schema
does not name (a renamed field), no read-only or deprecated field, enum values in the schema's enum, scalar types,
and every field the schema marks required (storage: `annotations.required` naming the method; container:
descriptions that begin "Required.") is present. The documents come from the pinned google-api-python-client
(`googleapiclient/discovery_cache/documents/`), not copied by hand, so a client or API upgrade is checked offline.

Decoding notes, from the clients' sources: the google-cloud-* REST transports send `$alt=json;enum-encoding=int`
(google-cloud-container 2.67 `container_v1/_compat.py`, google-api-core `rest_helpers.py`; `$alt` is the system
parameter `alt`, https://cloud.google.com/apis/docs/system-parameters, table "Definitions") and so send enums as
their proto numbers; a number is decoded through the client's own proto
enum whose member names equal the schema's enum, then checked by name.
"""

from __future__ import annotations

import enum
import inspect
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import googleapiclient
import pytest

from mtc_provider.core.definition.cluster.readiness import setup_fixable
from mtc_provider.operators.gcp import (
    MtcClusterReadinessOperator,
    MtcCreateBucketOperator,
    MtcCreateTpuNodePoolsOperator,
    MtcEnableCheckpointingOperator,
    MtcGrantBucketAccessOperator,
)
from mtc_provider.sensors.gcp import MtcClusterReadinessSensor
from mtc_provider.target import GkeTarget

from tests.support.gcp_fixtures import CLUSTER, LOCATION, PROJECT

DOCUMENTS = Path(googleapiclient.__file__).parent / "discovery_cache" / "documents"
SLICES = {"tpu_type": "v6e", "topology": "4x8", "num_slices": 2, "machine_type": "ct6e-standard-4t"}
# Not API calls: the OAuth token endpoint (service-account keyfile) and IAM Credentials impersonation.
AUTH_PATHS = re.compile(r"^/token$|:generateAccessToken$")


def load(name: str) -> dict[str, Any]:
    return json.loads((DOCUMENTS / f"{name}.json").read_text())


@dataclass(frozen=True)
class Method:
    doc: dict[str, Any]
    spec: dict[str, Any]
    pattern: re.Pattern[str]

    @property
    def id(self) -> str:
        return self.spec["id"]


def _methods(doc: dict[str, Any], resources: dict[str, Any]) -> list[Method]:
    found = []
    for resource in resources.values():
        for spec in (resource.get("methods") or {}).values():
            found.append(Method(doc, spec, _path_pattern(doc, spec)))
        found += _methods(doc, resource.get("resources") or {})
    return found


def _path_pattern(doc: dict[str, Any], spec: dict[str, Any]) -> re.Pattern[str]:
    """`v1/{+name}` with name's pattern `^projects/[^/]+/...$` -> a regex for the request path."""
    parameters = spec.get("parameters") or {}

    def expand(match: re.Match[str]) -> str:
        reserved, name = match.group(1) == "+", match.group(2)
        pattern = (parameters.get(name) or {}).get("pattern")
        inner = pattern.strip("^$") if pattern else (".+" if reserved else "[^/]+")
        return f"(?P<{name.replace('.', '_')}>{inner})"

    template = "/" + doc["servicePath"] + spec["path"]
    parts = re.split(r"(\{\+?[^}]+\})", template)
    regex = "".join(re.sub(r"\{(\+?)([^}]+)\}", expand, part) if part.startswith("{") else re.escape(part)
                    for part in parts)
    return re.compile(regex)


class Discovery:
    """The methods of some discovery documents, and the checks of one request against them."""

    def __init__(self, *names: str) -> None:
        self.docs = [load(name) for name in names]
        self.methods = [m for doc in self.docs for m in _methods(doc, doc["resources"])]

    def match(self, http: str, path: str) -> Method:
        candidates = [m for m in self.methods if m.spec["httpMethod"] == http and m.pattern.fullmatch(path)]
        assert len(candidates) == 1, f"{http} {path}: matches {[m.id for m in candidates] or 'no discovery method'}"
        return candidates[0]

    def check(self, http: str, path: str, query: dict[str, list[str]], body: Any) -> list[str]:
        """Problems with one request (empty: it conforms). Also returns the method id first, for the caller."""
        method = self.match(http, path)
        problems = []
        parameters = method.spec.get("parameters") or {}
        standard = method.doc.get("parameters") or {}
        path_names = set(method.pattern.groupindex)
        for key, values in query.items():
            name = key[1:] if key.startswith("$") and key[1:] in standard else key
            spec = parameters.get(name) if name in parameters else standard.get(name)
            if spec is None or (name in parameters and spec.get("location") != "query"):
                problems.append(f"{method.id}: query parameter {key!r} is not one of the method's "
                                f"({sorted(k for k, v in parameters.items() if v.get('location') == 'query')}) "
                                "or the API's standard parameters")
                continue
            for value in values:
                problems += _check_parameter(method.id, key, value, spec)
        for name, spec in parameters.items():
            if spec.get("required") and name not in path_names and name not in query:
                problems.append(f"{method.id}: required parameter {name!r} missing")
        request = (method.spec.get("request") or {}).get("$ref")
        if request is None:
            if body not in (None, {}):
                problems.append(f"{method.id}: a body {body!r}, but the method takes none")
        else:
            ints = any("enum-encoding=int" in value for value in query.get("$alt", []))
            problems += _check_schema(method, {"$ref": request}, body, f"{method.id} body", ints,
                                      skip_required=path_names)
        return problems


def _check_parameter(method_id: str, key: str, value: str, spec: dict[str, Any]) -> list[str]:
    where = f"{method_id}: query parameter {key}={value!r}"
    base = value.split(";", 1)[0] if key == "$alt" else value  # `json;enum-encoding=int`: alt=json + an option
    if spec.get("enum") and base not in spec["enum"]:
        return [f"{where}: not one of {spec['enum']}"]
    if spec.get("type") == "integer" and not re.fullmatch(r"-?\d+", value):
        return [f"{where}: not an integer"]
    if spec.get("type") == "boolean" and value not in ("true", "false"):
        return [f"{where}: not true/false"]
    return []


def _schema(method: Method, spec: dict[str, Any]) -> dict[str, Any]:
    return method.doc["schemas"][spec["$ref"]] if "$ref" in spec else spec


def _required(method: Method, name: str, spec: dict[str, Any]) -> bool:
    annotated = method.id in ((spec.get("annotations") or {}).get("required") or [])
    return annotated or str(spec.get("description", "")).startswith("Required.")


def _check_schema(method: Method, spec: dict[str, Any], value: Any, where: str, ints: bool,
                  skip_required: set[str] = frozenset()) -> list[str]:
    schema = _schema(method, spec)
    kind = schema.get("type")
    if kind == "object":
        if not isinstance(value, dict):
            return [f"{where}: {value!r} is not an object"]
        problems = []
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if key in properties:
                field = properties[key]
                if field.get("readOnly"):
                    problems.append(f"{where}.{key}: read-only (output only), not for a request")
                if field.get("deprecated"):
                    problems.append(f"{where}.{key}: deprecated")
                problems += _check_schema(method, field, item, f"{where}.{key}", ints)
            elif extra is not None:
                problems += _check_schema(method, extra, item, f"{where}.{key}", ints)
            else:
                problems.append(f"{where}.{key}: not a field of {schema.get('id', 'this object')} "
                                f"(fields: {', '.join(sorted(properties))})")
        for key, field in properties.items():
            if key not in value and key not in skip_required and _required(method, key, field):
                problems.append(f"{where}.{key}: required by {schema.get('id')}, missing")
        return problems
    if kind == "array":
        if not isinstance(value, list):
            return [f"{where}: {value!r} is not an array"]
        return [p for i, item in enumerate(value) for p in _check_schema(method, schema["items"], item,
                                                                          f"{where}[{i}]", ints)]
    if kind == "string":
        if "enum" in schema:
            name = _enum_name(schema["enum"], value) if ints and isinstance(value, int) else value
            return [] if name in schema["enum"] else [f"{where}: {value!r} is not one of {schema['enum']}"]
        if schema.get("format") in ("int64", "uint64") and isinstance(value, int) and not isinstance(value, bool):
            return []
        return [] if isinstance(value, str) else [f"{where}: {value!r} is not a string"]
    if kind == "integer":
        return [] if isinstance(value, int) and not isinstance(value, bool) else [f"{where}: {value!r} not an integer"]
    if kind == "number":
        return [] if isinstance(value, (int, float)) and not isinstance(value, bool) else [f"{where}: not a number"]
    if kind == "boolean":
        return [] if isinstance(value, bool) else [f"{where}: {value!r} is not true/false"]
    return []  # type "any"


def _proto_enums() -> list[type[enum.IntEnum]]:
    """Every enum of google-cloud-container's proto types (nested in messages too)."""
    from google.cloud.container_v1 import types

    found, seen = [], set()

    def walk(owner: Any) -> None:
        for member in vars(owner).values():
            if inspect.isclass(member) and id(member) not in seen:
                seen.add(id(member))
                if issubclass(member, enum.IntEnum):
                    found.append(member)
                elif getattr(member, "__module__", "").startswith("google.cloud.container_v1"):
                    walk(member)

    walk(types)
    return found


def _enum_name(names: list[str], number: int) -> str | None:
    """A proto enum number as its name, through the client's enum with exactly these member names."""
    matching = [e for e in _proto_enums() if {m.name for m in e} == set(names)]
    values = {e(number).name for e in matching if number in {m.value for m in e}}
    return values.pop() if len(values) == 1 else None


# --- the setup DAG's requests -------------------------------------------------------------------------------


class TI:
    task_id = "t"

    def xcom_push(self, key: str, value: object) -> None:
        pass


def api_calls(server) -> list[tuple[str, str, dict[str, list[str]], Any]]:
    return [(r.method, r.path, r.query_lists, r.body) for r in server.requests if not AUTH_PATHS.search(r.path)]


@pytest.fixture
def setup_requests(container, gcs, k8s, gcp_connection):
    """Run the setup DAG's GCP tasks in its order (dags/mtc_cluster_setup.py) on a bare cluster; record them."""
    target = GkeTarget(PROJECT, LOCATION, CLUSTER)
    common = {"target": target, "api_endpoint": container.url, "poll_interval": 0.01, "deferrable": False}
    context = {"ti": TI()}
    MtcClusterReadinessOperator(task_id="readiness", slices=SLICES, **common,
                                fixed_by_later_tasks=setup_fixable({"enable_mtc": True, "create_node_pools": True})
                                ).execute(context)
    MtcEnableCheckpointingOperator(task_id="enable_mtc", **common).execute(context)
    MtcCreateBucketOperator(task_id="bucket", bucket_name="ckpt", bucket_location="us-central1", **common
                            ).execute(context)
    MtcGrantBucketAccessOperator(task_id="grant", bucket_name="ckpt", resource_manager_endpoint=container.url,
                                 **common).execute(context)
    # (The CheckpointConfiguration goes to the Kubernetes API: checked against its CRD in test_wire.py.)
    MtcCreateTpuNodePoolsOperator(task_id="node_pools", slices=SLICES, node_locations=["us-central1-b"], **common
                                  ).execute(context)
    sensor = MtcClusterReadinessSensor(task_id="ready", target=target, slices=SLICES, api_endpoint=container.url)
    assert sensor.poke(context).is_done  # the readiness gate at the end passes
    return {"container": api_calls(container), "storage": api_calls(gcs)}


def test_every_setup_request_conforms_to_the_discovery_documents(setup_requests):
    container_api = Discovery("container.v1", "cloudresourcemanager.v3")
    storage_api = Discovery("storage.v1")
    seen, problems = [], []
    for api, calls in ((container_api, setup_requests["container"]), (storage_api, setup_requests["storage"])):
        for http, path, query, body in calls:
            seen.append(api.match(http, path).id)
            problems += api.check(http, path, query, body)
    assert problems == []
    # The setup DAG's order, one discovery method per request (operations.get polls and re-reads collapsed).
    order = [m for i, m in enumerate(seen) if i == 0 or seen[i - 1] != m]
    assert {"container.projects.locations.clusters.get", "container.projects.locations.clusters.update",
            "container.projects.locations.operations.get", "storage.buckets.get", "storage.buckets.insert",
            "cloudresourcemanager.projects.get", "storage.buckets.getIamPolicy", "storage.buckets.setIamPolicy",
            "container.projects.locations.clusters.nodePools.list",
            "container.projects.locations.clusters.nodePools.create"} == set(order)
    assert order[0] == "container.projects.locations.clusters.get"  # readiness reads before anything changes
    assert seen.count("container.projects.locations.clusters.update") == 2  # the guide's two updates


# --- the checker catches what it is for ------------------------------------------------------------------------


CONTAINER = Discovery("container.v1", "cloudresourcemanager.v3")
POOLS = f"/v1/projects/{PROJECT}/locations/{LOCATION}/clusters/{CLUSTER}/nodePools"
ALT = {"$alt": ["json;enum-encoding=int"]}


def pool_body(**config: Any) -> dict[str, Any]:
    return {"nodePool": {"name": "p", "initialNodeCount": 8, "locations": ["us-central1-b"],
                         "config": {"machineType": "ct6e-standard-4t", "workloadMetadataConfig": {"mode": 2},
                                    **config},
                         "placementPolicy": {"type": 1, "tpuTopology": "4x8"}}}


def test_checker_accepts_the_node_pool_the_operator_sends():
    assert CONTAINER.check("POST", POOLS, ALT, pool_body(oauthScopes=["https://www.googleapis.com/auth/monitoring"])) == []


@pytest.mark.parametrize("body, query, problem", [
    (pool_body(oauthScope=["x"]), ALT, "body.nodePool.config.oauthScope: not a field of NodeConfig"),
    (pool_body(workloadMetadataConfig={"mode": "GKE_METADATA_SERVER"}), {}, "is not one of ['MODE_UNSPECIFIED'"),
    (pool_body(workloadMetadataConfig={"mode": 7}), ALT, "7 is not one of"),
    (pool_body(diskSizeGb="100"), ALT, "diskSizeGb: '100' not an integer"),
    ({"nodePool": {"name": "p", "status": "RUNNING"}}, ALT, "nodePool.status: read-only"),
    ({"nodePool": {"name": "p"}, "zone": "us-central1-b"}, ALT, "body.zone: deprecated"),
    ({}, ALT, "body.nodePool: required by CreateNodePoolRequest, missing"),
    (pool_body(), {"alt": ["xml"]}, "query parameter alt='xml': not one of"),
    (pool_body(), {"parent": ["x"]}, "query parameter 'parent' is not one of the method's"),
])
def test_checker_catches_renamed_fields_bad_enums_and_missing_required_ones(body, query, problem):
    problems = CONTAINER.check("POST", POOLS, query, body)
    assert any(problem in p for p in problems), problems


def test_checker_catches_a_missing_required_query_parameter():
    storage_api = Discovery("storage.v1")
    body = {"name": "ckpt", "location": "US-CENTRAL1"}
    assert storage_api.check("POST", "/storage/v1/b", {"project": ["proj"]}, body) == []
    assert storage_api.check("POST", "/storage/v1/b", {}, body) == [
        "storage.buckets.insert: required parameter 'project' missing"]
    assert "storage.buckets.insert body.name: required by Bucket, missing" in storage_api.check(
        "POST", "/storage/v1/b", {"project": ["proj"]}, {"location": "US"})


def test_unknown_path_matches_no_method():
    with pytest.raises(AssertionError, match="no discovery method"):
        CONTAINER.match("POST", f"/v1/projects/{PROJECT}/locations/{LOCATION}/clusters/{CLUSTER}/nodepools")
