"""Adapters driven by the real client libraries against fake servers (and gcp-storage-emulator) on 127.0.0.1."""

from __future__ import annotations

import google.auth.credentials
import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import container_v1, resourcemanager_v3, storage
from kubernetes import client as k8s

from mtc_provider.adapters import retry
from mtc_provider.adapters.checkpoint_configuration import CheckpointConfigurationApi
from mtc_provider.adapters.gcs_bucket import GcsBucketApi, project_number
from mtc_provider.targets.gke.cluster import GkeClusterApi, operation_done
from mtc_provider.adapters.protocols import NotFound
from mtc_provider.core.basics.errors import BucketNotUsable, OperationFailed, SpecError
from mtc_provider.core.definition.cluster.iam import BUCKET_ROLE, bucket_members
from mtc_provider.core.definition.cluster.readiness import all_ok, evaluate_cluster
from mtc_provider.core.definition.description.spec import BucketSpec
from mtc_provider.core.definition.shape.tpu import SliceSpec

from tests.support.gcp_fixtures import CLUSTER, LOCATION, NUMBER, PROJECT
from tests.support.tests_reference import crd_schema

SLICES = SliceSpec("v6e", "4x8", 2, "ct6e-standard-4t")


class RefreshingCredentials(google.auth.credentials.Credentials):
    """Starts with a token the server has expired; refresh() gets a new one, as a real token refresh does."""

    def __init__(self, first: str = "token-expired") -> None:
        super().__init__()
        self.token = first
        self.refreshes = 0

    def refresh(self, request) -> None:
        self.refreshes += 1
        self.token = f"token-fresh-{self.refreshes}"


def gke(server, credentials=None) -> GkeClusterApi:
    client = container_v1.ClusterManagerClient(credentials=credentials or AnonymousCredentials(), transport="rest",
                                               client_options={"api_endpoint": server.url})
    return GkeClusterApi(client, PROJECT, LOCATION, CLUSTER)


def wait(api, operation):
    for _ in range(10):
        if operation_done(api.operation(operation)):
            return
    raise AssertionError("operation never finished")


# --- GKE -------------------------------------------------------------------------------------------


def test_enable_mtc_in_two_updates_then_ready(container):
    api = gke(container)
    assert not all_ok(evaluate_cluster(api.describe(), SLICES, PROJECT, LOCATION))
    container.op_polls = 2
    wait(api, api.set_workload_pool())
    wait(api, api.enable_mtc_addons())
    cluster = api.describe()
    assert cluster["workloadIdentityConfig"]["workloadPool"] == f"{PROJECT}.svc.id.goog"
    assert cluster["addonsConfig"]["highScaleCheckpointingConfig"]["enabled"] is True
    assert cluster["addonsConfig"]["gcsFuseCsiDriverConfig"]["enabled"] is True
    assert cluster["addonsConfig"]["httpLoadBalancing"] == {"disabled": False}  # untouched


def test_node_pools_created_with_shape_and_compact_placement(container):
    api = gke(container)
    wait(api, api.create_tpu_node_pool("mtc-slice-0", SLICES, ["us-central1-b"]))
    wait(api, api.create_tpu_node_pool("mtc-slice-1", SLICES, ["us-central1-b"]))
    pools = api.node_pools()
    assert [p["name"] for p in pools] == ["mtc-slice-0", "mtc-slice-1"]
    assert pools[0]["initialNodeCount"] == 8 and pools[0]["config"]["machineType"] == "ct6e-standard-4t"
    assert pools[0]["placementPolicy"]["tpuTopology"] == "4x8" and pools[0]["placementPolicy"]["type"] == "COMPACT"
    assert pools[0]["config"]["workloadMetadataConfig"]["mode"] == "GKE_METADATA"
    check = {c.name: c for c in evaluate_cluster(api.describe(), SLICES, PROJECT, LOCATION)}["tpu_node_pools"]
    assert check.ok


def test_operation_ending_in_error_raises(container):
    api = gke(container)
    container.fail_next_operation = "Insufficient regional quota to satisfy request: TPUS"
    operation = api.create_tpu_node_pool("mtc-slice-0", SLICES)
    with pytest.raises(OperationFailed, match="Insufficient regional quota"):
        wait(api, operation)
    assert api.node_pools() == []


def test_403_fails_fast_naming_the_permission(container):
    container.fail("PUT", "/clusters/mtc", 403, times=5, message="Required 'container.clusters.update' permission")
    with pytest.raises(retry.PermissionDenied, match="missing permission container.clusters.update"):
        gke(container).enable_mtc_addons()
    assert container.count("PUT") == 1  # no retry


@pytest.mark.parametrize("status", [429, 503])
def test_429_and_503_are_retried_with_a_bound(container, status):
    container.fail("GET", "/clusters/mtc", status, times=2)
    assert gke(container).describe()["name"] == CLUSTER
    assert container.count("GET", "/clusters/mtc") == 3
    container.fail("GET", "/clusters/mtc", status, times=retry.ATTEMPTS)
    with pytest.raises(retry.Retryable):
        gke(container).describe()


def test_404_cluster_is_not_found(container):
    api = GkeClusterApi(gke(container).client, PROJECT, LOCATION, "missing")
    with pytest.raises(NotFound):
        api.describe()


def test_401_expired_token_is_refreshed_and_the_call_continues(container):
    container.expired_tokens.add("token-expired")
    credentials = RefreshingCredentials()
    assert gke(container, credentials).describe()["name"] == CLUSTER
    assert credentials.refreshes == 1
    assert [r.token for r in container.requests] == ["token-expired", "token-fresh-1"]


def test_project_number_from_resource_manager(container):
    client = resourcemanager_v3.ProjectsClient(credentials=AnonymousCredentials(), transport="rest",
                                               client_options={"api_endpoint": container.url})
    assert project_number(PROJECT, client=client) == NUMBER


# --- GCS: the fake JSON API (HNS, UBLA, IAM v3) ------------------------------------------------------


def storage_client(server, credentials=None) -> storage.Client:
    return storage.Client(project=PROJECT, credentials=credentials or AnonymousCredentials(),
                          client_options={"api_endpoint": server.url})


def test_bucket_created_with_hns_and_ubla_then_second_run_changes_nothing(gcs):
    api = GcsBucketApi(storage_client(gcs))
    first = api.ensure_bucket(BucketSpec("ckpt", "us-central1"), PROJECT)
    assert first.created and first.hierarchical_namespace and first.uniform_bucket_level_access
    assert gcs.buckets["ckpt"]["hierarchicalNamespace"] == {"enabled": True}
    second = api.ensure_bucket(BucketSpec("ckpt", "us-central1"), PROJECT)
    assert not second.created and gcs.bucket_writes == 1


def test_zone_is_rejected_before_any_call(gcs):
    with pytest.raises(SpecError, match="us-central1-a is a zone of region us-central1"):
        GcsBucketApi(storage_client(gcs)).ensure_bucket(BucketSpec("ckpt", "us-central1-a"), PROJECT)
    assert gcs.requests == []


def test_existing_bucket_without_hns_is_an_error(gcs):
    gcs.add_bucket("old", "us-central1", hns=False)
    with pytest.raises(BucketNotUsable, match="hierarchical namespace is off"):
        GcsBucketApi(storage_client(gcs)).ensure_bucket(BucketSpec("old", "us-central1"), PROJECT)


def test_bucket_of_another_project_is_an_error(gcs):
    gcs.foreign.add("taken")
    with pytest.raises(BucketNotUsable, match="another project"):
        GcsBucketApi(storage_client(gcs)).ensure_bucket(BucketSpec("taken", "us"), PROJECT)


def test_grant_binds_exactly_the_guides_members_idempotently(gcs):
    gcs.add_bucket("ckpt")
    members = bucket_members(PROJECT, NUMBER, "default", "default")
    api = GcsBucketApi(storage_client(gcs))
    first = api.grant("ckpt", BUCKET_ROLE, members)
    assert first.added == members and first.already_present == []
    policy = gcs.policies["ckpt"]
    assert policy["version"] == 3
    assert {"role": BUCKET_ROLE, "members": sorted(members)} in policy["bindings"]
    assert {"role": "roles/storage.legacyBucketOwner", "members": ["projectOwner:proj"]} in policy["bindings"]
    second = api.grant("ckpt", BUCKET_ROLE, members)
    assert second.added == [] and second.already_present == members and gcs.policy_writes == 1


def test_grant_keeps_the_roles_existing_members_when_adding_the_two_principals(gcs):
    """setIamPolicy replaces the whole policy (cloud.google.com/storage/docs/json_api/v1/buckets/setIamPolicy): a
    binding written without its existing members would revoke them."""
    gcs.add_bucket("ckpt")
    gcs.policies["ckpt"]["bindings"].append({"role": BUCKET_ROLE, "members": ["serviceAccount:etl@p.iam.gserviceaccount.com",
                                                                           "group:ml-team@example.com"]})
    members = bucket_members(PROJECT, NUMBER, "default", "default")
    result = GcsBucketApi(storage_client(gcs)).grant("ckpt", BUCKET_ROLE, members)
    assert result.added == members
    (binding,) = [b for b in gcs.policies["ckpt"]["bindings"] if b["role"] == BUCKET_ROLE]
    assert set(binding["members"]) == {"serviceAccount:etl@p.iam.gserviceaccount.com", "group:ml-team@example.com",
                                       *members}


@pytest.mark.parametrize("status", [412, 409])
def test_concurrent_policy_change_is_reread_and_retried(gcs, status):
    gcs.add_bucket("ckpt")
    gcs.conflict_status = status
    original = gcs.route

    def racing(method, path, query, body):  # someone else writes between our read and our write, once
        if method == "PUT" and path.endswith("/iam") and not getattr(racing, "done", False):
            racing.done = True
            gcs.policies["ckpt"]["bindings"].append({"role": "roles/storage.objectViewer", "members": ["user:b@x"]})
            gcs.bump("ckpt")
        return original(method, path, query, body)

    gcs.route = racing
    result = GcsBucketApi(storage_client(gcs)).grant("ckpt", BUCKET_ROLE, ["m1"])
    assert result.added == ["m1"]
    roles = {b["role"] for b in gcs.policies["ckpt"]["bindings"]}
    assert {"roles/storage.objectViewer", BUCKET_ROLE} <= roles  # the other writer's change survived
    assert gcs.count("PUT") == 2 and gcs.count("GET", "/iam") == 2


def test_gcs_401_refreshes_token(gcs):
    gcs.add_bucket("ckpt")
    gcs.expired_tokens.add("token-expired")
    credentials = RefreshingCredentials()
    api = GcsBucketApi(storage_client(gcs, credentials))
    assert not api.ensure_bucket(BucketSpec("ckpt", "us-central1"), PROJECT).created
    assert credentials.refreshes == 1


# --- GCS: gcp-storage-emulator through the real GCSHook ----------------------------------------------


def test_bucket_create_get_list_through_gcshook_on_the_emulator(emulator, monkeypatch):
    import json

    from airflow.providers.google.cloud.hooks.gcs import GCSHook

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator)
    monkeypatch.setenv("AIRFLOW_CONN_GCS_EMULATOR", json.dumps(
        {"conn_type": "google_cloud_platform", "extra": {"is_anonymous": True, "project": PROJECT}}))
    hook = GCSHook(gcp_conn_id="gcs_emulator")
    api = GcsBucketApi(hook.get_conn())
    bucket = api.client.bucket("emu-ckpt")
    assert api._get("emu-ckpt") is None
    bucket.create(project=PROJECT, location="us-central1")
    hook.upload("emu-ckpt", "run/checkpoints/10/commit_success.txt", data=b"ok")
    assert hook.list("emu-ckpt", prefix="run/checkpoints/") == ["run/checkpoints/10/commit_success.txt"]
    # The emulator drops HNS (facts.md): the adapter must refuse the bucket rather than accept it silently.
    with pytest.raises(BucketNotUsable, match="hierarchical namespace is off"):
        api.ensure_bucket(BucketSpec("emu-ckpt", "us-central1"), PROJECT)


# --- Kubernetes: CheckpointConfiguration -------------------------------------------------------------


def k8s_factory(server, tls, tokens):
    import base64
    import tempfile

    ca = tempfile.NamedTemporaryFile("wb", suffix=".pem", delete=False)
    ca.write(base64.b64decode(tls[1]))
    ca.close()

    def factory():
        token = next(tokens)  # kubernetes 36 reads "BearerToken", older "authorization": set both
        configuration = k8s.Configuration(host=server.url, api_key={"authorization": token, "BearerToken": token},
                                          api_key_prefix={"authorization": "Bearer", "BearerToken": "Bearer"})
        configuration.ssl_ca_cert = ca.name
        return k8s.ApiClient(configuration)

    return factory


def body(bucket="ckpt", size="61Gi"):
    from mtc_provider.core.definition.render.checkpoint_config import build_checkpoint_configuration
    from mtc_provider.core.definition.shape.sizing import ramdisk_size

    result = build_checkpoint_configuration("mtc-config", bucket, SLICES, ramdisk_size(7e9, SLICES.hosts_per_slice))
    result["spec"]["inMemoryVolumeSize"] = size
    return result


def test_checkpoint_configuration_create_update_noop(k8s, tls):
    import jsonschema

    api = CheckpointConfigurationApi(k8s_factory(k8s, tls, iter(["t1"] * 10)))
    assert api.get("mtc-config") is None
    desired = body()
    jsonschema.validate(desired, crd_schema())
    assert api.apply(desired).action == "created"
    assert api.apply(desired).action == "unchanged" and k8s.writes == 1
    updated = api.apply(body(bucket="other"))
    assert updated.action == "updated" and k8s.writes == 2
    stored = k8s.checkpoint_configurations["mtc-config"]
    assert stored["spec"]["cloudStorageBucketName"] == "other"
    assert stored["metadata"]["uid"] == "uid-mtc-config"  # replaced in place, not deleted and recreated
    assert stored["spec"] == desired["spec"] | {"cloudStorageBucketName": "other"}  # nothing pruned


def test_checkpoint_configuration_stale_resource_version_is_retried(k8s, tls):
    api = CheckpointConfigurationApi(k8s_factory(k8s, tls, iter(["t1"] * 10)))
    api.apply(body())
    original = k8s.route

    def racing(method, path, query, payload):
        if method == "PUT" and not getattr(racing, "done", False):
            racing.done = True
            k8s.rv += 1
            k8s.checkpoint_configurations["mtc-config"]["metadata"]["resourceVersion"] = str(k8s.rv)
        return original(method, path, query, payload)

    k8s.route = racing
    assert api.apply(body(size="80Gi")).action == "updated"
    assert k8s.checkpoint_configurations["mtc-config"]["spec"]["inMemoryVolumeSize"] == "80Gi"
    assert k8s.count("PUT") == 2


def test_checkpoint_configuration_401_rebuilds_client_with_fresh_token(k8s, tls):
    k8s.expired_tokens.add("old")
    api = CheckpointConfigurationApi(k8s_factory(k8s, tls, iter(["old", "new", "new", "new"])))
    assert api.apply(body()).action == "created"
    assert [r.token for r in k8s.requests] == ["old", "new", "new"]


def test_checkpoint_configuration_403_names_the_permission(k8s, tls):
    k8s.fail("GET", "mtc-config", 403, message='User "x" cannot get resource')
    api = CheckpointConfigurationApi(k8s_factory(k8s, tls, iter(["t"] * 3)))
    with pytest.raises(retry.PermissionDenied, match="checkpointconfigurations.checkpointing.gke.io get"):
        api.get("mtc-config")
