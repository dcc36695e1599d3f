"""The doubles of the GCP control-plane tests (tests/doubles: the Container API, GCS, the cluster's Kubernetes API);
all bind 127.0.0.1 and are stopped by the fixtures."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import ssl
import tempfile
from pathlib import Path

import pytest

from mtc_provider.adapters import retry

from tests.doubles.container import FakeContainerServer, base_cluster
from tests.doubles.gcs import GcsDouble
from tests.doubles.kubernetes import KubernetesApiDouble

PROJECT = "proj-42"  # a valid project id (6-30 characters: core.definition.description.locations)
NUMBER = "123456789012"
LOCATION = "us-central1"
CLUSTER = "mtc"


@pytest.fixture(autouse=True)
def fast_retry(monkeypatch):
    monkeypatch.setattr(retry, "INITIAL_WAIT", 0.01)
    monkeypatch.setattr(retry, "MAX_WAIT", 0.05)


@pytest.fixture(scope="session")
def tls():
    """A self-signed certificate for 127.0.0.1: the fake API server's cert and the cluster's CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                         x509.DNSName("localhost")]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    folder = Path(tempfile.mkdtemp(prefix="mtc-tls-"))
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    (folder / "cert.pem").write_bytes(cert_pem)
    (folder / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                        serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "cert.pem", folder / "key.pem")
    return context, base64.b64encode(cert_pem).decode()


@pytest.fixture
def k8s(tls):
    from mtc_provider.core.definition.render.checkpoint_config import (
        build_checkpoint_configuration)  # noqa: F401 - contract present
    from tests.support.tests_reference import crd_spec_fields

    # The cluster's API server, over TLS; the MTC CSI driver's CheckpointConfiguration pruned to its CRD's schema.
    server = KubernetesApiDouble(spec_fields=crd_spec_fields(), ssl_context=tls[0]).start()
    yield server
    server.stop()


@pytest.fixture
def container(k8s, tls):
    server = FakeContainerServer(NUMBER).start()
    cluster = base_cluster(CLUSTER)
    cluster["endpoint"] = f"127.0.0.1:{k8s.port}"
    cluster["masterAuth"]["clusterCaCertificate"] = tls[1]
    server.add_cluster(PROJECT, LOCATION, cluster)
    yield server
    server.stop()


@pytest.fixture
def gcs():
    server = GcsDouble(NUMBER).start()
    yield server
    server.stop()


@pytest.fixture
def emulator():
    """gcp-storage-emulator, in memory, on a free 127.0.0.1 port."""
    import socket

    from gcp_storage_emulator.server import create_server

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket=None)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture(scope="session")
def keyfile_pem():
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


@pytest.fixture
def gcp_connection(monkeypatch, container, gcs, keyfile_pem):
    """google_cloud_default as a service-account keyfile whose token_uri is the fake's /token; GCS at the fake."""
    keyfile = {"type": "service_account", "project_id": PROJECT, "private_key_id": "k1", "private_key": keyfile_pem,
               "client_email": f"airflow@{PROJECT}.iam.gserviceaccount.com", "client_id": "1",
               "token_uri": f"{container.url}/token"}
    conn = {"conn_type": "google_cloud_platform",
            "extra": {"keyfile_dict": json.dumps(keyfile), "project": PROJECT}}
    monkeypatch.setenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", json.dumps(conn))
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.url)
    return conn
