"""Google-style connection parameters on every GCP operator and the readiness sensor (issue 11, item 11).

gcp_conn_id, impersonation_chain and project_id are top-level and templated; every call (Container API,
Resource Manager, GCS, the Kubernetes API for the CheckpointConfiguration, the deferred operation poll) uses
them; the project falls back to the connection's, as the google provider's hooks do. Impersonation is real:
google-auth calls IAM Credentials generateAccessToken (served by the fake) and every API request must carry
the impersonated token. use_dns_endpoint points the Kubernetes client at the DNS-based control-plane endpoint.
"""

from __future__ import annotations

import base64
import copy
import json

import pytest
from airflow.sdk.exceptions import TaskDeferred

from mtc_provider.core.basics.errors import NotReady
from mtc_provider.operators.gcp import (
    MtcApplyCheckpointConfigurationOperator,
    MtcClusterReadinessOperator,
    MtcCreateBucketOperator,
    MtcCreateTpuNodePoolsOperator,
    MtcEnableCheckpointingOperator,
    MtcGrantBucketAccessOperator,
)
from mtc_provider.sensors.gcp import MtcClusterReadinessSensor
from mtc_provider.target import GkeTarget

from tests.support.gcp_fixtures import CLUSTER, LOCATION, PROJECT

SA = "mtc-setup@proj.iam.gserviceaccount.com"
SLICES = {"tpu_type": "v6e", "topology": "4x8", "num_slices": 2, "machine_type": "ct6e-standard-4t"}
SIZING = {"parameters": 7e9}
OPERATORS = (MtcClusterReadinessOperator, MtcEnableCheckpointingOperator, MtcCreateBucketOperator,
             MtcGrantBucketAccessOperator, MtcApplyCheckpointConfigurationOperator, MtcCreateTpuNodePoolsOperator,
             MtcClusterReadinessSensor)


class TI:
    task_id = "t"

    def __init__(self) -> None:
        self.xcoms: dict[str, object] = {}

    def xcom_push(self, key: str, value: object) -> None:
        self.xcoms[key] = value


def _keyfile_connection(pem: str, token_uri: str, project: str) -> str:
    keyfile = {"type": "service_account", "project_id": project, "private_key_id": "k1", "private_key": pem,
               "client_email": f"airflow@{project}.iam.gserviceaccount.com", "client_id": "1", "token_uri": token_uri}
    return json.dumps({"conn_type": "google_cloud_platform",
                       "extra": {"keyfile_dict": json.dumps(keyfile), "project": project}})


@pytest.fixture
def setup_connection(monkeypatch, container, gcs, k8s, keyfile_pem):
    """mtc_setup_gcp names the project; google_cloud_default is a dead end (another project, no token server),
    so any call that ignores the operator's connection fails. IAM Credentials is served by the container fake."""
    import google.auth.iam

    monkeypatch.setenv("AIRFLOW_CONN_MTC_SETUP_GCP", _keyfile_connection(keyfile_pem, f"{container.url}/token", PROJECT))
    monkeypatch.setenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT",
                       _keyfile_connection(keyfile_pem, "http://127.0.0.1:9/token", "wrong-project"))
    monkeypatch.setattr(google.auth.iam, "_IAM_ENDPOINT",
                        f"{container.url}/v1/projects/-/serviceAccounts/{{}}:generateAccessToken")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.url)


def _tokens(server) -> set[str]:
    return {r.token for r in server.requests if r.path != "/token" and ":generateAccessToken" not in r.path}


def test_impersonation_parameters_are_templated_on_every_gcp_operator_and_the_sensor():
    for cls in OPERATORS:
        assert {"gcp_conn_id", "impersonation_chain", "project_id"} <= set(cls.template_fields), cls.__name__


def test_impersonation_and_the_connections_project_reach_every_gke_gcs_iam_and_kubernetes_call(
        setup_connection, container, gcs, k8s):
    target = GkeTarget(None, LOCATION, CLUSTER)  # no project: the connection's; default connection: overridden
    common = {"target": target, "gcp_conn_id": "mtc_setup_gcp", "impersonation_chain": [SA],
              "api_endpoint": container.url, "poll_interval": 0, "deferrable": False}
    context = {"ti": TI()}
    assert MtcEnableCheckpointingOperator(task_id="e", **common).execute(context)["changed"] is True
    assert MtcCreateTpuNodePoolsOperator(task_id="p", slices=SLICES, node_locations=["us-central1-b"],
                                         **common).execute(context)["created"]
    assert MtcCreateBucketOperator(task_id="b", bucket_name="ckpt", **common).execute(context)["changed"] is True
    grant = MtcGrantBucketAccessOperator(task_id="g", bucket_name="ckpt", resource_manager_endpoint=container.url,
                                         **common).execute(context)
    assert grant["added"]
    applied = MtcApplyCheckpointConfigurationOperator(task_id="c", name="mtc-config", bucket_name="ckpt",
                                                      slices=SLICES, sizing=SIZING, **common).execute(context)
    assert applied["action"] == "created"
    try:
        MtcClusterReadinessOperator(task_id="r", slices=SLICES, sizing=SIZING,
                                    checkpoint_configuration_name="mtc-config", **common).execute(context)
    except NotReady:
        pass  # the fake's nodes need not pass every check; the report's calls are what is checked here
    assert {c["name"]: c for c in context["ti"].xcoms["readiness"]["checks"]}
    sensor = MtcClusterReadinessSensor(task_id="s", slices=SLICES, sizing=SIZING, deferrable=False,
                                       **{k: v for k, v in common.items() if k not in ("poll_interval", "deferrable")})
    sensor.poke(context)

    impersonated = f"impersonated-{SA}"
    assert _tokens(container) == {impersonated}  # Container API and Resource Manager
    assert _tokens(gcs) == {impersonated}  # bucket and IAM policy
    assert _tokens(k8s) == {impersonated}  # the CheckpointConfiguration on the cluster's API server
    assert {sa for sa, _ in container.impersonated} == {SA}
    cluster = container.clusters[f"{PROJECT}/{LOCATION}/{CLUSTER}"]  # the connection's project was used
    assert cluster["workloadIdentityConfig"]["workloadPool"] == f"{PROJECT}.svc.id.goog"


def test_impersonation_reaches_the_deferred_operation_poll(setup_connection, container):
    op = MtcEnableCheckpointingOperator(task_id="e", target={"kind": "gke", "project_id": "", "location": LOCATION,
                                                             "cluster_name": CLUSTER},
                                        gcp_conn_id="mtc_setup_gcp", impersonation_chain=SA,
                                        api_endpoint=container.url, deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({"ti": TI()})
    trigger = deferred.value.trigger
    _, kwargs = trigger.serialize()
    assert {k: kwargs["target"][k] for k in ("gcp_conn_id", "impersonation_chain", "project_id")} == {
        "gcp_conn_id": "mtc_setup_gcp", "impersonation_chain": SA, "project_id": PROJECT}
    before = len(container.requests)
    trigger._poll()  # what the triggerer runs, rebuilt from the serialized kwargs
    assert {r.token for r in container.requests[before:] if "/operations/" in r.path} == {f"impersonated-{SA}"}


def test_impersonation_operator_project_id_takes_precedence_over_the_targets(setup_connection, container):
    container.add_cluster("other-proj", LOCATION, copy.deepcopy(container.clusters[f"{PROJECT}/{LOCATION}/{CLUSTER}"]))
    op = MtcCreateTpuNodePoolsOperator(task_id="p", target=GkeTarget(PROJECT, LOCATION, CLUSTER), slices=SLICES,
                                       node_locations=["us-central1-b"], gcp_conn_id="mtc_setup_gcp",
                                       project_id="other-proj",
                                       api_endpoint=container.url, poll_interval=0)
    op.execute({"ti": TI()})
    assert container.clusters[f"other-proj/{LOCATION}/{CLUSTER}"]["nodePools"]
    assert not container.clusters[f"{PROJECT}/{LOCATION}/{CLUSTER}"]["nodePools"]


@pytest.mark.parametrize("given_as", ["target", "parameters"])
def test_dns_endpoint_is_where_the_kubernetes_client_goes(monkeypatch, gcp_connection, container, k8s, tls,
                                                          tmp_path, given_as):
    """GKE's DNS-based endpoint (controlPlaneEndpointsConfig.dnsEndpointConfig.endpoint) serves a publicly
    trusted certificate, so the google provider's hook verifies it against the system store, not the cluster CA:
    https://cloud.google.com/kubernetes-engine/docs/concepts/network-isolation#dns-based_endpoint"""
    cluster = container.clusters[f"{PROJECT}/{LOCATION}/{CLUSTER}"]
    cluster["endpoint"] = "127.0.0.1:9"  # the IP endpoint: nothing listens there
    cluster["privateClusterConfig"] = {"privateEndpoint": "127.0.0.1:9"}
    cluster["controlPlaneEndpointsConfig"] = {"dnsEndpointConfig": {"endpoint": f"localhost:{k8s.port}",
                                                                    "allowExternalTraffic": True}}
    cluster["masterAuth"]["clusterCaCertificate"] = base64.b64encode(b"not the CA that signs the DNS endpoint").decode()
    public_ca = tmp_path / "public-ca.pem"
    public_ca.write_bytes(base64.b64decode(tls[1]))
    # The trust store holds the endpoint's issuer: the system store for kubernetes client >= 30, which leaves
    # ssl_ca_cert=None to urllib3; Mozilla's bundle (certifi.where()) for older clients (kubernetes/client/rest.py).
    monkeypatch.setenv("SSL_CERT_FILE", str(public_ca))
    monkeypatch.setattr("certifi.where", lambda: str(public_ca))
    # The google provider's GKE operators take use_dns_endpoint beside project_id/location/cluster_name.
    cluster_args = ({"target": GkeTarget(PROJECT, LOCATION, CLUSTER, use_dns_endpoint=True)} if given_as == "target"
                    else {"project_id": PROJECT, "location": LOCATION, "cluster_name": CLUSTER,
                          "use_dns_endpoint": "True"})  # as a rendered template leaves it
    op = MtcApplyCheckpointConfigurationOperator(
        task_id="c", name="mtc-config", bucket_name="ckpt", slices=SLICES, sizing=SIZING, api_endpoint=container.url,
        **cluster_args)
    assert op.execute({"ti": TI()})["action"] == "created"
    assert k8s.writes == 1 and "mtc-config" in k8s.checkpoint_configurations


def test_google_parameters_without_target_name_the_cluster_every_gcp_call_uses(setup_connection, container, gcs):
    """GKEStartJobOperator's parameter names (project_id, location, cluster_name, gcp_conn_id, impersonation_chain)
    in place of a target: the node pools land on that cluster, every call impersonated."""
    container.add_cluster("other-proj", LOCATION, copy.deepcopy(container.clusters[f"{PROJECT}/{LOCATION}/{CLUSTER}"]))
    op = MtcCreateTpuNodePoolsOperator(task_id="p", project_id="other-proj", location=LOCATION, cluster_name=CLUSTER,
                                       gcp_conn_id="mtc_setup_gcp", impersonation_chain=[SA], slices=SLICES,
                                       node_locations=["us-central1-b"], api_endpoint=container.url, poll_interval=0)
    assert op._target().kind == "gke"
    op.execute({"ti": TI()})
    assert container.clusters[f"other-proj/{LOCATION}/{CLUSTER}"]["nodePools"]
    assert not container.clusters[f"{PROJECT}/{LOCATION}/{CLUSTER}"]["nodePools"]
    assert _tokens(container) == {f"impersonated-{SA}"}


@pytest.mark.parametrize("cls", OPERATORS, ids=lambda c: c.__name__)
def test_google_parameters_conflicting_with_the_target_fail_naming_both_before_any_call(setup_connection, container,
                                                                                       cls):
    from mtc_provider.core.basics.errors import SpecError

    extra = {"bucket_name": "ckpt"} if "Bucket" in cls.__name__ else {}
    if cls is MtcApplyCheckpointConfigurationOperator:
        extra = {"name": "mtc-config", "bucket_name": "ckpt"}
    if cls in (MtcClusterReadinessOperator, MtcCreateTpuNodePoolsOperator, MtcClusterReadinessSensor,
               MtcApplyCheckpointConfigurationOperator):
        extra["slices"] = SLICES
    op = cls(task_id="t", target=GkeTarget(PROJECT, LOCATION, CLUSTER), cluster_name="another-cluster",
             gcp_conn_id="mtc_setup_gcp", api_endpoint=container.url, **extra)
    before = len(container.requests)
    with pytest.raises(SpecError, match=rf"cluster_name.*'another-cluster'.*target\.cluster_name='{CLUSTER}'"):
        op.execute({"ti": TI()})
    assert len(container.requests) == before  # refused before any call
    with pytest.raises(SpecError, match="location"):  # a local target has no cluster to agree with
        cls(task_id="t", target={"kind": "local"}, location=LOCATION, cluster_name=CLUSTER, **extra).execute(
            {"ti": TI()})


@pytest.mark.parametrize("use_dns_endpoint", [True, False])
def test_dns_endpoint_reaches_the_launch_operators_kubernetes_clients(gcp_connection, tls, use_dns_endpoint):
    """The launch operator's connection dict carries use_dns_endpoint to both hooks: through the DNS endpoint
    the Kubernetes client verifies against the system store (no cluster CA file), as GKEClusterConnection does."""
    import asyncio

    from mtc_provider import targets

    url = "https://gke-0123456789abcdef.us-central1.gke.goog"
    connection = {"kind": "gke", "cluster_url": url, "ssl_ca_cert": tls[1],
                  "gcp_conn_id": "google_cloud_default", "use_dns_endpoint": use_dns_endpoint}
    sync = targets.jobset_api(connection).client_factory().configuration

    async def async_configuration():
        async with targets.async_jobset_api(connection).client_factory() as client:
            return client.configuration

    for configuration in (sync, asyncio.run(async_configuration())):
        assert configuration.host == url
        assert (configuration.ssl_ca_cert is None) is use_dns_endpoint
